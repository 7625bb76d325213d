"""The optimizer step on the model's device, one layer at a time, inside
the backward (:func:`wspager.torch.step_in_backward`).

Stepping the fp32 host masters on the CPU costs seconds a step for a
model of a few billion parameters, far more than the forward and backward.
Here each paged layer is stepped where its gradients are, as soon as the
backward has them all, by a torch optimizer of the user's choice:

* the layer's fp32 masters and the optimizer's state for them live in host
  memory (page-locked on CUDA) between steps; when the backward
  re-acquires the layer, a side stream starts copying them in, so they
  arrive while the layer's backward runs;
* once the layer's gradients are complete, the optimizer steps its masters
  on the compute stream (the gradients never leave the device);
* another side stream copies the stepped masters and state back out, and
  the new weights in the layer's dtype; once the layer is released, a
  thread waits for those copies and hands the weights to the pager
  (``wsp_update``: a copy and checksums, off the backward's thread); the
  next forward waits for every such update, so it sees all of them.

Each backward is one step: gradients are not accumulated across backward
passes.  On the host backend the same runs on the CPU, synchronously.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

import torch


class _Master:
    """One parameter's fp32 master: the Parameter the optimizer steps (its
    .data on the device during the step, in host memory between steps),
    and host buffers for its state and its new weight."""
    __slots__ = ("index", "param", "host", "weight", "state_host")

    def __init__(self, index: int, param: torch.nn.Parameter, host, weight):
        self.index, self.param, self.host, self.weight = index, param, host, weight
        self.state_host: Optional[Dict[str, torch.Tensor]] = None


class _Layer:
    __slots__ = ("masters", "opt", "arrived", "leaving")

    def __init__(self):
        self.masters: List[_Master] = []
        self.opt: Optional[torch.optim.Optimizer] = None
        self.arrived = None   # (device masters, device state, event): copied in ahead
        self.leaving = None   # event: host masters, state and weights written


class StepInBackward:
    """What :func:`wspager.torch.step_in_backward` returns.  ``step()``
    hands every stepped layer's weights to the pager (waiting for the last
    copies); ``zero_grad()`` does nothing: gradients never leave the device."""

    def __init__(self, trainer, optimizer, kwargs):
        self.tr = trainer
        self.off = trainer.off
        self.make_opt = lambda params: optimizer(params, **kwargs)
        self.layers: Dict[int, _Layer] = {}
        # Stepped layers whose weights are not yet in the pager, with the
        # update under way (None until the layer is released).
        self.pending: List[Tuple[object, _Layer, Optional[Future]]] = []
        self.cuda = self.off.device.type == "cuda"
        if self.cuda:
            self.s_in = torch.cuda.Stream(self.off.device)
            self.s_out = torch.cuda.Stream(self.off.device)
            self.updater = ThreadPoolExecutor(1, thread_name_prefix="wspager-update")
        # A wrong optimizer or argument fails here, not in a backward hook.
        self.make_opt([torch.nn.Parameter(torch.zeros(1))])

    # Called by the trainer ----------------------------------------------
    def prefetch(self, g) -> None:
        """The backward re-acquired g: copy its masters and state in."""
        ls = self.layers.get(g.index)
        if not self.cuda or ls is None or ls.arrived is not None:
            return
        with torch.cuda.stream(self.s_in):
            if ls.leaving is not None:
                self.s_in.wait_event(ls.leaving)
            ls.arrived = self._to_device(ls) + (self._record(self.s_in),)

    def step_layer(self, g, grads: List[Optional[torch.Tensor]]) -> None:
        """g's gradients (one per parameter of the group, None where none)
        are complete on the current stream: step its parameters."""
        ls = self.layers.get(g.index) or self._first(g)
        if self.cuda:
            self._step_cuda(g, ls, grads)
        else:
            self._bind_grads(ls, grads)
            ls.opt.step()
            for m in ls.masters:
                m.weight.copy_(m.param.data)
                m.param.grad = None
        self.pending.append((g, ls, None))

    def reap(self, block: bool) -> None:
        """Start the updates of the layers stepped since (they are released
        now); with block, wait until every update is done.  An update's
        error is raised here."""
        left = []
        for g, ls, fut in self.pending:
            if fut is None:
                if not self.cuda:   # the host backend: now, on this thread
                    self._update(g, ls)
                    continue
                fut = self.updater.submit(self._update, g, ls)
            if block or fut.done():
                fut.result()
            else:
                left.append((g, ls, fut))
        self.pending = left

    def _update(self, g, ls: _Layer) -> None:
        """Once the copies out are done: the new weights to the pager."""
        if ls.leaving is not None:
            ls.leaving.synchronize()
        pos = self.tr.pos[g.index]
        vals: List[Optional[int]] = [None] * len(pos)
        for m in ls.masters:
            vals[pos[g.params[m.index][1]]] = m.weight.data_ptr()
        self.off.pager.update(g.index, vals)

    # What the user calls -------------------------------------------------
    def step(self) -> None:
        self.reap(block=True)

    def zero_grad(self, set_to_none: bool = True) -> None:
        del set_to_none

    # Inside ---------------------------------------------------------------
    def _first(self, g) -> _Layer:
        """Masters from the layer's current weights (acquired if needed),
        made where the step runs: no copy in for the first step."""
        ls = _Layer()
        held = g.layer is not None
        if not held:
            self.off.acquire(g)
        try:
            for i, (_, name, dtype, shape) in enumerate(g.params):
                if not dtype.is_floating_point:
                    continue
                v = self.off._view(g, g.layer, name, dtype, shape).detach()
                param = torch.nn.Parameter(v.to(torch.float32, copy=True))
                host = torch.empty(shape, dtype=torch.float32, pin_memory=True) if self.cuda else None
                weight = torch.empty(shape, dtype=dtype, pin_memory=self.cuda)
                ls.masters.append(_Master(i, param, host, weight))
        finally:
            if not held:
                self.off.release(g)
        ls.opt = self.make_opt([m.param for m in ls.masters])
        if self.cuda:
            ls.arrived = ([m.param.data for m in ls.masters], [{} for _ in ls.masters], None)
        self.layers[g.index] = ls
        return ls

    def _to_device(self, ls: _Layer):
        dev = self.off.device
        masters = [m.host.to(dev, non_blocking=True) for m in ls.masters]
        state = [{k: h.to(dev, non_blocking=True) for k, h in (m.state_host or {}).items()}
                 for m in ls.masters]
        return masters, state

    @staticmethod
    def _record(stream) -> torch.cuda.Event:
        ev = torch.cuda.Event()
        ev.record(stream)
        return ev

    @staticmethod
    def _bind_grads(ls: _Layer, grads) -> None:
        """fp32 gradients for the fp32 masters (no copy when they are fp32),
        once the masters are where the gradients are."""
        for m in ls.masters:
            gr = grads[m.index]
            m.param.grad = gr.to(torch.float32) if gr is not None else None

    def _step_cuda(self, g, ls: _Layer, grads) -> None:
        cur = torch.cuda.current_stream(self.off.device)
        if ls.arrived is None:   # not re-acquired in this backward (an embedding)
            if ls.leaving is not None:
                cur.wait_event(ls.leaving)
            ls.arrived = self._to_device(ls) + (None,)
        masters, state, ev = ls.arrived
        ls.arrived = None
        if ev is not None:
            cur.wait_event(ev)
        for m, d, sd in zip(ls.masters, masters, state):
            for t in [d, *sd.values()]:
                t.record_stream(cur)   # made on the copy-in stream
            m.param.data = d
            ls.opt.state[m.param].update(sd)
        self._bind_grads(ls, grads)
        ls.opt.step()
        new = [m.param.data.to(g.params[m.index][2]) for m in ls.masters]
        done = self._record(cur)
        with torch.cuda.stream(self.s_out):
            self.s_out.wait_event(done)
            for m, n in zip(ls.masters, new):
                st = ls.opt.state[m.param]
                if m.state_host is None:   # the state the optimizer made on the device
                    m.state_host = {k: torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                                    for k, t in st.items()
                                    if torch.is_tensor(t) and t.device.type == "cuda"}
                for k, h in m.state_host.items():
                    st[k].record_stream(self.s_out)
                    h.copy_(st[k], non_blocking=True)
                    st[k] = h
                for t, h in ((m.param.data, m.host), (n, m.weight)):
                    t.record_stream(self.s_out)
                    h.copy_(t, non_blocking=True)
                m.param.data = m.host
                m.param.grad = None
            ls.leaving = self._record(self.s_out)
