"""The optimizer step on the model's device, one layer at a time, inside
the backward (:func:`wspager.torch.step_in_backward`).

Stepping the fp32 host masters on the CPU costs seconds a step for a
model of a few billion parameters, far more than the forward and backward.
Here each paged layer is stepped where its gradients are, as soon as the
backward has them all, by a torch optimizer of the user's choice:

* the layer's fp32 masters and the optimizer's state for them (the state
  tensors shaped like the parameter: AdamW's two moments) live between
  steps in one buffer the pager keeps for the layer (``wsp_state_acquire``):
  in host memory up to the pager's ``state_cache``, beyond it in an
  unnamed overflow file, so that weights and optimizer state larger than
  host memory train within a bound.  Small state (AdamW's step count)
  stays with the optimizer;
* when the backward re-acquires the layer, its buffer is taken and a side
  stream copies it in (page-locked: straight from the pager's memory) once
  the layer's weights have arrived, so it arrives while the layer's
  backward runs and never ahead of the weights the backward needs first
  (a layer the backward does not re-acquire, an embedding, is copied in
  after the layer it followed in the last backward);
* once the layer's gradients are complete, the optimizer steps its masters
  on the compute stream (the gradients never leave the device);
* another side stream copies the new weights in the layer's dtype out,
  then the stepped masters and state back into the buffer; once the layer
  is released, a thread waits for the weights and hands them to the pager
  (``wsp_update``), then for the buffer and hands it back.  The next
  forward waits for every such update, so it sees all of them, but not
  for the buffers: the last layers' state leaves while it runs.

Each backward is one step: gradients are not accumulated across backward
passes.  On the host backend the same runs on the CPU, synchronously, the
optimizer working in the buffer itself.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

import torch

_ALIGN = 64
# (master index in the layer, state key or None for the master itself,
#  shape, dtype, offset in the buffer)
_Entry = Tuple[int, Optional[str], torch.Size, torch.dtype, int]


class _Master:
    """One parameter's fp32 master: the Parameter the optimizer steps (its
    .data on the device, or a view of the layer's buffer, only during the
    step)."""
    __slots__ = ("index", "param")

    def __init__(self, index: int, param: torch.nn.Parameter):
        self.index, self.param = index, param


class _Layer:
    __slots__ = ("masters", "opt", "layout", "nbytes", "held", "arrived", "weights_out",
                 "leaving", "weights", "releasing")

    def __init__(self):
        self.masters: List[_Master] = []
        self.opt: Optional[torch.optim.Optimizer] = None
        self.layout: List[_Entry] = []   # where masters and state lie in the buffer
        self.nbytes = 0                  # the buffer's size (0: none yet)
        self.held: Optional[int] = None  # the buffer's address while taken
        self.arrived = None   # (device masters, device state, event): copied in ahead
        self.weights_out = None   # event: the new weights written
        self.leaving = None   # event: then the buffer written
        self.weights: Optional[List[torch.Tensor]] = None   # new weights for wsp_update
        self.releasing: Optional[Future] = None   # the buffer's way back to the pager


def _host_view(pager, addr: int, e: _Entry) -> torch.Tensor:
    """A CPU tensor over the buffer's bytes of entry e (no copy); it keeps
    the pager's memory alive."""
    _, _, shape, dtype, off = e
    n = max(1, torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
    buf = pager._host_buffer(addr + off, n)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype)[:torch.Size(shape).numel()] \
        .view(shape)


class StepInBackward:
    """What :func:`wspager.torch.step_in_backward` returns.  ``step()``
    hands every stepped layer's weights to the pager (waiting for the last
    weights' copies; masters and state may still be on their way out);
    ``zero_grad()`` does nothing: gradients never leave the device."""

    def __init__(self, trainer, optimizer, kwargs, clip_per_layer=None):
        self.tr = trainer
        self.max_norm = clip_per_layer
        self.off = trainer.off
        self.pager = self.off.pager
        self.make_opt = lambda params: optimizer(params, **kwargs)
        self.layers: Dict[int, _Layer] = {}
        # Stepped layers whose weights are not yet in the pager, with the
        # update under way (None until the layer is released).
        self.pending: List[Tuple[object, _Layer, Optional[Future]]] = []
        self.cuda = self.off.device.type == "cuda"
        # Layers stepped without being re-acquired by the backward (an
        # embedding: its backward needs no weights), by the layer whose
        # copies were issued last before their step in the last backward:
        # theirs are issued right after that layer's next time.
        self.after: Dict[int, list] = {}
        self.last_copied: Optional[int] = None
        if self.cuda:
            self.s_in = torch.cuda.Stream(self.off.device)
            self.s_out = torch.cuda.Stream(self.off.device)
            self.updater = ThreadPoolExecutor(1, thread_name_prefix="wspager-update")
        # A wrong optimizer or argument fails here, not in a backward hook.
        self.make_opt([torch.nn.Parameter(torch.zeros(1))])

    # Called by the trainer ----------------------------------------------
    def prefetch(self, g) -> None:
        """The backward re-acquired g: take its buffer and copy it in."""
        ls = self.layers.get(g.index)
        if not self.cuda or ls is None or ls.arrived is not None or not ls.nbytes:
            return
        # The copies wait on the device for g's weights.  Issued at once,
        # they would queue on the copy engine ahead of the fills of the
        # layers the backward needs next (its acquires run ahead), and the
        # compute stream would idle behind several layers' state while
        # nothing goes out.  A second acquire of g, on this stream, only
        # adds that wait (the backward's own acquire holds the slot).
        self.pager.acquire(g.index, self.s_in.cuda_stream, routed=True).release()
        self._copy_in(g, ls, self.s_in)
        self.last_copied = g.index
        for x in self.after.get(g.index, ()):
            lx = self.layers[x.index]
            if lx.arrived is None and lx.nbytes:
                self._copy_in(x, lx, self.s_in)

    def step_layer(self, g, grads: List[Optional[torch.Tensor]]) -> None:
        """g's gradients (one per parameter of the group, None where none)
        are complete on the current stream: step its parameters."""
        ls = self.layers.get(g.index) or self._first(g)
        if self.cuda:
            self._step_cuda(g, ls, grads)
        else:
            self._step_cpu(g, ls, grads)
        self.pending.append((g, ls, None))

    def reap(self, block: bool) -> None:
        """Start the updates of the layers stepped since (they are released
        now): the new weights to the pager, then the buffer back; with
        block, wait until every layer's new weights are in the pager.  An
        update's error is raised here, a buffer's where it is next taken
        or in :meth:`settle`."""
        if block:   # between backward passes
            self.last_copied = None
        left = []
        for g, ls, fut in self.pending:
            if fut is None:
                if not self.cuda:   # the host backend: now, on this thread
                    self._update(g, ls)
                    self._give_back(g, ls)
                    continue
                fut = self.updater.submit(self._update, g, ls)
                ls.releasing = self.updater.submit(self._give_back, g, ls)
            if block or fut.done():
                fut.result()
            else:
                left.append((g, ls, fut))
        self.pending = left

    def settle(self) -> None:
        """Every update done and every buffer back with the pager (before it
        saves or closes)."""
        self.reap(block=True)
        for ls in self.layers.values():
            self._settled(ls)

    @staticmethod
    def _settled(ls: _Layer) -> None:
        """The layer's buffer is back (or still held), never on its way."""
        fut, ls.releasing = ls.releasing, None
        if fut is not None:
            fut.result()

    def _update(self, g, ls: _Layer) -> None:
        """Once the new weights are out: to the pager."""
        if ls.weights_out is not None:
            ls.weights_out.synchronize()
        pos = self.tr.pos[g.index]
        vals: List[Optional[int]] = [None] * len(pos)
        for m, w in zip(ls.masters, ls.weights):
            vals[pos[g.params[m.index][1]]] = w.data_ptr()
        self.pager.update(g.index, vals)
        ls.weights = None

    def _give_back(self, g, ls: _Layer) -> None:
        """Once the masters and state are out: the buffer back to the pager."""
        if ls.leaving is not None:
            ls.leaving.synchronize()
        held, ls.held = ls.held, None
        if held is not None:
            self.pager.state_release(g.index, True)

    # What the user calls -------------------------------------------------
    def step(self) -> None:
        self.reap(block=True)

    def zero_grad(self, set_to_none: bool = True) -> None:
        del set_to_none

    # Inside ---------------------------------------------------------------
    def _first(self, g) -> _Layer:
        """Masters from the layer's current weights (acquired if needed),
        made where the step runs; the optimizer makes its state there at
        the first step."""
        ls = _Layer()
        held = g.layer is not None
        if not held:
            self.off.acquire(g)
        try:
            for i, (_, name, dtype, _) in enumerate(g.params):
                if dtype.is_floating_point:
                    v = self.off._view(g, g.layer, name, dtype, g.params[i][3]).detach()
                    ls.masters.append(_Master(i, torch.nn.Parameter(v.to(torch.float32,
                                                                            copy=True))))
        finally:
            if not held:
                self.off.release(g)
        ls.opt = self.make_opt([m.param for m in ls.masters])
        if self.cuda:
            ls.arrived = ([m.param.data for m in ls.masters], [{} for _ in ls.masters], None)
        self.layers[g.index] = ls
        return ls

    def _tensors(self, ls: _Layer):
        """(entry without offset, tensor) of what goes in the buffer now:
        each master, then its state tensors shaped like it, by key."""
        out = []
        for k, m in enumerate(ls.masters):
            out.append(((k, None, m.param.shape, torch.float32), m.param.data))
            st = ls.opt.state.get(m.param, {})
            for key in sorted(st):
                t = st[key]
                if torch.is_tensor(t) and t.shape == m.param.shape and t.numel():
                    out.append(((k, key, t.shape, t.dtype), t))
        return out

    @staticmethod
    def _lay_out(parts) -> Tuple[List[_Entry], int]:
        layout, off = [], 0
        for (k, key, shape, dtype), t in parts:
            layout.append((k, key, shape, dtype, off))
            off += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
        return layout, off

    def _take(self, g, ls: _Layer, layout: List[_Entry], nbytes: int) -> int:
        """The layer's buffer for this layout (a new one of zeros when its
        size changes: the old one is handed back first)."""
        self._settled(ls)
        if ls.held is not None and nbytes != ls.nbytes:
            self.pager.state_release(g.index, False)
            ls.held = None
        if ls.held is None:
            ls.held = self.pager.state_acquire(g.index, nbytes)
        ls.layout, ls.nbytes = layout, nbytes
        return ls.held

    def _copy_in(self, g, ls: _Layer, stream) -> None:
        """Take the buffer; copy masters and state to the device on `stream`."""
        addr = self._take(g, ls, ls.layout, ls.nbytes)
        dev = self.off.device
        masters: List[Optional[torch.Tensor]] = [None] * len(ls.masters)
        state: List[Dict[str, torch.Tensor]] = [{} for _ in ls.masters]
        with torch.cuda.stream(stream):
            for e in ls.layout:
                t = _host_view(self.pager, addr, e).to(dev, non_blocking=True)
                if e[1] is None:
                    masters[e[0]] = t
                else:
                    state[e[0]][e[1]] = t
            ls.arrived = (masters, state, self._record(stream))

    @staticmethod
    def _record(stream) -> torch.cuda.Event:
        ev = torch.cuda.Event()
        ev.record(stream)
        return ev

    def _bind_grads(self, ls: _Layer, grads) -> None:
        """fp32 gradients for the fp32 masters (no copy when they are fp32),
        once the masters are where the gradients are; clipped to the
        layer's own norm when asked (there is no global norm: the first
        layers step before the last gradients exist)."""
        for m in ls.masters:
            gr = grads[m.index]
            m.param.grad = gr.to(torch.float32) if gr is not None else None
        if self.max_norm is not None:
            torch.nn.utils.clip_grad_norm_([m.param for m in ls.masters], self.max_norm)

    def _drop(self, ls: _Layer, device) -> None:
        """The masters and state leave the optimizer's hands until the next
        step (their memory is the buffer's, or freed)."""
        for m in ls.masters:
            st = ls.opt.state.get(m.param, {})
            for key, t in list(st.items()):
                if torch.is_tensor(t) and t.shape == m.param.shape and t.numel():
                    st[key] = torch.empty(0, dtype=t.dtype, device=device)
            m.param.data = torch.empty(0, device=device)
            m.param.grad = None

    def _step_cuda(self, g, ls: _Layer, grads) -> None:
        cur = torch.cuda.current_stream(self.off.device)
        if ls.arrived is None:   # not re-acquired in this backward (an embedding)
            self._copy_in(g, ls, cur)
            if self.last_copied is not None and ls.nbytes:   # ahead, next time
                follow = self.after.setdefault(self.last_copied, [])
                if g not in follow:
                    follow.append(g)
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
        parts = self._tensors(ls)
        layout, nbytes = self._lay_out(parts)
        addr = self._take(g, ls, layout, nbytes)
        # The weights first: the next forward waits for them, not for the state.
        with torch.cuda.stream(self.s_out):
            self.s_out.wait_event(done)
            ls.weights = []
            for n in new:
                n.record_stream(self.s_out)
                w = torch.empty(n.shape, dtype=n.dtype, pin_memory=True)
                w.copy_(n, non_blocking=True)
                ls.weights.append(w)
            ls.weights_out = self._record(self.s_out)
            for e, (_, t) in zip(layout, parts):
                t.record_stream(self.s_out)
                _host_view(self.pager, addr, e).copy_(t, non_blocking=True)
            ls.leaving = self._record(self.s_out)
        self._drop(ls, self.off.device)

    def _step_cpu(self, g, ls: _Layer, grads) -> None:
        if ls.nbytes:   # the optimizer works in the buffer itself
            addr = self._take(g, ls, ls.layout, ls.nbytes)
            for e in ls.layout:
                m = ls.masters[e[0]]
                if e[1] is None:
                    m.param.data = _host_view(self.pager, addr, e)
                else:
                    ls.opt.state[m.param][e[1]] = _host_view(self.pager, addr, e)
        self._bind_grads(ls, grads)
        ls.opt.step()
        ls.weights = [m.param.data.to(g.params[m.index][2], copy=True) for m in ls.masters]
        parts = self._tensors(ls)
        layout, nbytes = self._lay_out(parts)
        if layout != ls.layout:   # the first step (the state is new), or other state
            if ls.held is not None:   # views of the buffer about to be replaced
                parts = [(e, t.clone()) for e, t in parts]
            addr = self._take(g, ls, layout, nbytes)
            for e, (_, t) in zip(layout, parts):
                _host_view(self.pager, addr, e).copy_(t)
        self._drop(ls, self.off.device)
