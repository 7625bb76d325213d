"""Training through the pager: the backward pass of an offloaded model.

What :func:`wspager.torch.offload` adds with ``train=True``:

* Paged parameters require gradients.  Autograd keeps handles in place of
  paged weights (:mod:`wspager._saved`); the backward re-acquires a layer
  when it first unpacks one of its trained weights (:meth:`Trainer.hold`)
  and releases it once the layer's gradients have left.  Weights whose
  ``requires_grad`` was turned off (a frozen base under LoRA adapters) are
  held only while autograd uses them, and send no gradient.
* Each paged parameter's gradient, once accumulated for the pass (a
  post-accumulate-grad hook), goes to the pager at once (``wsp_grad_push``
  of that one tensor: copied out on the pager's write-back stream after the
  current stream's work, added into fp32 host accumulators), so that a
  layer's first gradients leave while its last ones are computed; the
  parameter's ``.grad`` is dropped, and once every parameter of the layer
  has had its gradient the layer is released.  The GPU never holds more
  than the layers in use.  On a GPU some gradients go as fp32 instead
  (cast there, ``wsp_grad_push_f32``: copied straight into their
  accumulators, with no widening left for the host), a share measured
  while running (:mod:`wspager._gradsplit`).
* An embedding's gradient (an ``nn.Embedding`` whose weight no other module
  shares) is nonzero only in the rows of the pass's tokens: those rows go
  (``wsp_grad_push_rows``), a fraction of the table.  It is the last
  gradient of a language model's backward, so its copy is what the pass
  would otherwise end waiting for.
* ``wspager.torch.grads(model)`` gives the accumulated gradients;
  ``wspager.torch.parameters(model)`` fp32 host master copies whose
  ``.grad`` are those accumulators, for any torch optimizer.
* The masters' ``.grad`` are the accumulators (zero-copy views, bound at
  the end of each backward once the copies are in, and again before a
  step), so clipping, unscaling or a norm between backward and step see
  them, and micro-batches accumulate into them as into any ``.grad``;
  after ``zero_grad()`` (``set_to_none`` or not) the next backward starts
  them over.  ``parameters()`` come in ``model.parameters()`` order.
* The model's own paged parameters (``model.parameters()``, what
  transformers' Trainer gives its optimizer and its clipping) get the same
  accumulators as ``.grad`` after each backward, while their data stays the
  placeholder; a forward that may be backpropagated takes those ``.grad``
  off again (:meth:`Trainer.strip`: autograd would add into them), noting
  any the user set to None (the layer's accumulation starts over).  For
  the step of an optimizer over them, each holds its master's data
  (:meth:`Trainer.before_step`), so it steps the masters and keeps its
  state in fp32 on the host.
* After a step of an optimizer over those masters (a global optimizer
  step hook), each layer's masters, in the layer's dtype, replace its
  weights in the pager (``wsp_update``), so the next forward uses them.
* ``wspager.torch.save(model, out)``: a new pack, atomically (``wsp_save``).
* Or, with :func:`wspager.torch.step_in_backward`, no host masters: each
  layer is stepped on the device inside the backward (``_devstep.py``).
"""
from __future__ import annotations

import time
import weakref
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from ._gradsplit import F32Share

_TRAINERS: "weakref.WeakSet[Trainer]" = weakref.WeakSet()
_NARROWED = (torch.float32, torch.bfloat16)   # what wsp_update_f32 narrows to
_HOOKS: list = []


def _step_pre(opt, _args, _kwargs) -> None:
    for tr in list(_TRAINERS):
        tr.refuse_placeholders(opt)
        if tr.steps_with(opt) and tr.enter_step(opt):
            tr.before_step(opt)


def _step_post(opt, _args, _kwargs) -> None:
    for tr in list(_TRAINERS):
        if tr.steps_with(opt) and tr.leave_step(opt):
            try:
                tr.apply_masters()
            finally:
                tr.take_back_masters()


def _install_hooks() -> None:
    """Once per process: every optimizer step passes by the trainers."""
    if not _HOOKS:
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
        _HOOKS.append(register_optimizer_step_pre_hook(_step_pre))
        _HOOKS.append(register_optimizer_step_post_hook(_step_post))


class Trainer:
    """The training state of one offloaded model (``model._wspager.trainer``)."""

    def __init__(self, off, model: torch.nn.Module):
        self.off = off
        self.by_param: Dict[int, Tuple[object, int]] = {}
        self.pos: Dict[int, Dict[str, int]] = {}     # layer -> tensor name -> index in the layer
        self.bwd_held: Dict[int, object] = {}        # layer -> group held for the backward
        self.inflight: List[Tuple[int, List[torch.Tensor]]] = []   # gradients being copied out
        self.callback_queued = False
        self.end_seconds = 0.0     # what the last backward's end took (a benchmark's figure)
        self.masters: Optional[Dict[int, List[Optional[torch.nn.Parameter]]]] = None
        self.pushed_this_backward: set = set()
        # layers pushed since bind_grads, in the order of their last push
        self.pushed_since_bind: Dict[int, None] = {}
        self.devstep = None                          # _devstep.StepInBackward, when chosen
        self.gsum = None                             # _group.GradientSum with a process group
        # Embeddings whose gradient goes as rows: param id -> the token
        # tensors of the passes since its last push (None: too many, whole).
        self.row_ids: Dict[int, Optional[List[torch.Tensor]]] = {}
        # Which gradients go as fp32 (cast on the device, no host widening).
        self.split = F32Share(max((L.raw_bytes for L in off.pager.pack.layers), default=0),
                              off.device.type == "cuda")
        # Layers whose accumulators were zeroed since their last push (all,
        # at first): their next pushes may go straight in (fresh_now: those
        # of this backward).
        self.zeroed: set = {g.index for g in off.groups}
        self.fresh_now: set = set()
        for g in off.groups:
            names = [t.name for t in off.pager.pack.layers[g.index].tensors]
            self.pos[g.index] = {n: k for k, n in enumerate(names)}
            g.ready = set()
            for i, (p, _, dtype, _) in enumerate(g.params):
                if not dtype.is_floating_point:
                    continue
                p.requires_grad_(True)
                self.by_param[id(p)] = (g, i)
                off.handles.append(p.register_post_accumulate_grad_hook(self._grad_ready))
        # Parameters kept on the device (resident=, or made by a converter)
        # train as any parameter does: autograd fills their .grad, and the
        # optimizer over parameters() steps them where they are.
        # The stacked parameters of routed experts are placeholders: their
        # experts' own groups train (wspager._experts), and parameters()
        # gives those groups' masters in their place.
        self.stacked: Dict[int, Tuple[object, str]] = {}
        for m, x in off.experts:
            for attr in x.targets:
                self.stacked[id(m._parameters[attr])] = (x, attr)
        for p in model.parameters():
            if id(p) not in self.by_param and id(p) not in self.stacked and \
                    p.is_floating_point() and p.is_leaf:
                p.requires_grad_(True)
        # The model's own paged parameters (model.parameters(), as the
        # Trainer's optimizer and clipping take them): layer -> positions.
        # After a backward their .grad are the accumulators, as the
        # masters' are; for an optimizer step over them each holds its
        # master's data (lend_masters).
        own_ids = {id(p) for p in model.parameters()}
        self.own: Dict[int, List[int]] = {}
        for g in off.groups:
            at = [i for i, (p, _, _, _) in enumerate(g.params) if id(p) in own_ids
                  and id(p) in self.by_param]
            if at:
                self.own[g.index] = at
        self.own_bound: set = set()     # ids of own parameters whose .grad we bound
        self.dropped: set = set()       # layers whose own .grad the user set to None
        self.lent: List[Tuple[torch.nn.Parameter, torch.Tensor]] = []   # (param, its data)
        self.stepping: list = []                     # optimizers whose step runs, outermost first
        self.masters_bound: set = set()   # layers whose masters' .grad we bound (ever)
        for m in self._row_embeddings(model):
            self.row_ids[id(m.weight)] = []
            off.handles.append(m.register_forward_pre_hook(self._saw_tokens, with_kwargs=True))
        off.handles.append(model.register_forward_pre_hook(self._enter))
        off.saved.trainer = self
        self.master_ids: set = set()
        # (layer, tensor name) -> (accumulator's numpy view, its tensor):
        # the pager hands out the same views while they stay, and binding
        # the same tensor again costs nothing (bind_grads, every backward)
        self.acc_tensors: Dict[Tuple[int, str], Tuple[object, torch.Tensor]] = {}
        _install_hooks()
        _TRAINERS.add(self)

    def _row_embeddings(self, model: torch.nn.Module) -> List[torch.nn.Embedding]:
        """Paged embeddings whose weight gradient is nonzero only in the
        rows of their input: plain lookups (no max_norm, which rewrites
        rows; no sparse gradients) of a weight no other module holds (a
        tied output head makes it dense)."""
        holders: Dict[int, int] = {}
        for m in model.modules():
            for p in m._parameters.values():
                if p is not None:
                    holders[id(p)] = holders.get(id(p), 0) + 1
        return [m for m in model.modules()
                if type(m) is torch.nn.Embedding and id(m.weight) in self.by_param
                and m.max_norm is None and not m.sparse and holders[id(m.weight)] == 1]

    def _saw_tokens(self, mod, args, kwargs):
        if not torch.is_grad_enabled():
            return
        key = id(mod.weight)
        # Its rows come last in the backward, into an accumulator zeroed
        # first: zeroed now, when its .grad was let go, the pager clears it
        # beside the forward (the push zeroes it again only if .grad is
        # still None then: nothing).
        g, _ = self.by_param[key]
        if self.devstep is None and g.index not in self.pushed_this_backward:
            self._start_over_if_dropped(g)
        seen = self.row_ids.get(key)
        ids = args[0] if args else kwargs.get("input")
        if seen is None or not isinstance(ids, torch.Tensor):
            self.row_ids[key] = None     # this pass's gradient goes whole
            return
        seen.append(ids.detach())
        # Rows (an int64 index and the row each) must be smaller than the
        # whole gradient: then they also fit the pager's staging buffers.
        w = mod.weight
        row_bytes = 8 + w[0].numel() * w.element_size()
        if sum(t.numel() for t in seen) * row_bytes >= w.numel() * w.element_size():
            self.row_ids[key] = None     # rows would be no smaller

    def _enter(self, _mod, _args):
        if self.devstep is not None:   # the last step's weights, before they are read
            self.devstep.reap(block=True)

    def strip(self, g) -> None:
        """A forward that may be backpropagated is about to use g: its own
        parameters' .grad (the accumulators, bound after the last backward)
        come off, so that autograd hands _grad_ready the new gradient alone
        (it would add into a .grad it finds); a .grad the user set to None
        meanwhile is remembered: the layer's accumulation starts over."""
        for i in self.own.get(g.index, ()):
            p = g.params[i][0]
            if p.grad is not None:
                p.grad = None
            elif id(p) in self.own_bound:
                self.dropped.add(g.index)
            self.own_bound.discard(id(p))

    # The backward ---------------------------------------------------------
    def hold(self, g) -> None:
        """Acquire g for this backward (once), and make sure the pass ends
        with every layer pushed and released."""
        self._queue_end()
        if g.index not in self.bwd_held:
            self.off.acquire(g)
            self.bwd_held[g.index] = g
            if self.devstep is not None:
                self.devstep.prefetch(g)

    def _queue_end(self) -> None:
        if not self.callback_queued:
            self.split.begin()
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
            self.callback_queued = True

    # Gradients -----------------------------------------------------------
    def _grad_ready(self, p: torch.nn.Parameter) -> None:
        g, i = self.by_param[id(p)]
        self._queue_end()
        g.ready.add(i)
        trainable = sum(1 for q, _, _, _ in g.params if q.requires_grad)
        if self.devstep is not None:   # the device steps a layer at once
            if len(g.ready) == trainable:
                self._step_on_device(g)
            return
        self._push(g, i)
        if len(g.ready) == trainable:
            self._layer_done(g)

    def _push(self, g, i: int) -> None:
        """Parameter i's gradient to the pager (dropped from .grad)."""
        off = self.off
        self.pushed_since_bind.pop(g.index, None)
        self.pushed_since_bind[g.index] = None
        if g.index not in self.pushed_this_backward:
            self.pushed_this_backward.add(g.index)
            self._start_over_if_dropped(g)
            self.dropped.discard(g.index)
            if g.index in self.zeroed:
                self.zeroed.discard(g.index)
                self.fresh_now.add(g.index)
        p, name, _, _ = g.params[i]
        gr = p.grad
        p.grad = None
        if gr is None:
            return
        gr = gr.detach()
        at = self.pos[g.index][name]
        keep = self._push_rows(g, at, p, gr)
        if keep is None:
            gr = gr.contiguous()
            fresh = g.index in self.fresh_now
            wide = self.split.widen(gr) if self.split.pick(gr, fresh) else None
            if wide is not None:
                off.pager.grad_push_f32(g.index, at, wide.data_ptr(), off._stream())
                keep = [wide]
            else:
                ptrs: List[Optional[int]] = [None] * len(self.pos[g.index])
                ptrs[at] = gr.data_ptr()
                off.pager.grad_push(g.index, ptrs, off._stream())
                keep = [gr]
        self.inflight.append((g.index, keep))
        self._reap()

    def _start_over_if_dropped(self, g) -> None:
        """After zero_grad(set_to_none=True) (the masters' .grad None), the
        layer's accumulators start over, as a parameter's .grad does; with
        .grad there, gradients accumulate into it."""
        ms = self.masters.get(g.index) if self.masters is not None else None
        if self._own_dropped(g) or (ms and any(m is not None and m.grad is None for m in ms)):
            self.off.pager.grad_zero(g.index)
            self.zeroed.add(g.index)

    def _push_rows(self, g, at: int, p, gr: torch.Tensor) -> Optional[List[torch.Tensor]]:
        """An embedding's gradient as the rows of its tokens (sorted, repeats
        marked -1: no count of distinct tokens, which would wait for the
        device); None when it goes whole."""
        if id(p) not in self.row_ids:
            return None
        seen = self.row_ids[id(p)]
        self.row_ids[id(p)] = []
        if not seen:
            return None
        ids = torch.cat([t.reshape(-1) for t in seen]).to(device=gr.device, dtype=torch.int64)
        ids, _ = torch.sort(ids)
        rows = ids.clone()
        rows[1:].masked_fill_(ids[1:] == ids[:-1], -1)
        values = gr.index_select(0, ids).contiguous()
        self.off.pager.grad_push_rows(g.index, at, rows.data_ptr(), rows.numel(),
                                      values.data_ptr(), self.off._stream())
        return [rows, values]

    def _layer_done(self, g) -> None:
        """Every parameter of g has had its gradient: release the layer."""
        g.ready.clear()
        if g.index in self.bwd_held:
            del self.bwd_held[g.index]
            self.off.release(g)

    def _step_on_device(self, g) -> None:
        grads = []
        for p, _, _, _ in g.params:
            grads.append(p.grad.detach() if p.grad is not None else None)
            p.grad = None
        g.ready.clear()
        if any(gr is not None for gr in grads):
            self.devstep.step_layer(g, grads)
        if g.index in self.bwd_held:
            del self.bwd_held[g.index]
            self.off.release(g)
        self.devstep.reap(block=False)

    def _reap(self) -> None:
        """Drop the gradients whose copies are done (their memory may be reused)."""
        self.inflight = [(layer, ts) for layer, ts in self.inflight
                         if not self.off.pager.grad_done(layer)]

    def _end_backward(self) -> None:
        t0 = time.perf_counter()
        self.callback_queued = False
        for g in self.off.groups:
            if g.ready:            # some parameters got no gradient in this pass
                if self.devstep is not None:
                    self._step_on_device(g)
                else:
                    self._layer_done(g)
        for g in list(self.bwd_held.values()):
            self.off.release(g)
        self.bwd_held.clear()
        for key in self.row_ids:   # tokens of forwards whose backward never ran
            self.row_ids[key] = []
        self.pushed_this_backward.clear()
        # Data parallel: summed over the ranks before anything reads them.
        if self.gsum is not None:
            self.wait()
            self.gsum.after_backward(self.off.pager, self.off.groups)
        else:
            self._refuse_unshared()
        # The .grad of the masters and of the model's own paged parameters
        # are real once the backward is over, as any parameter's: clipping,
        # unscaling and norms between backward and step see them (views of
        # the accumulators, their copies in).
        if self.devstep is None:
            self.bind_grads()
        self.split.end(bool(self.fresh_now), hold=self.off.pager.who_decodes() == "trying")
        self.fresh_now.clear()
        self.end_seconds = time.perf_counter() - t0

    def _refuse_unshared(self) -> None:
        """A model sharded by torch's FSDP2 (its parameters made DTensors)
        over several ranks trains its paged layers on each rank's data
        alone unless the pager averages them: without a process group it
        cannot, and the ranks would drift apart silently."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        try:
            from torch.distributed.tensor import DTensor
        except ImportError:     # a torch older than FSDP2 (2.4)
            return
        if any(isinstance(p, DTensor) for p in self.off.model.parameters()):
            raise RuntimeError(
                "wspager: this model's parameters are sharded (torch's FSDP) but its paged "
                "layers train with no process group to average their gradients over: pass "
                "process_group= (e.g. torch.distributed.group.WORLD) to from_pretrained or "
                "offload with train=True, as FSDP shards only what it manages")

    def wait(self) -> None:
        self.off.pager.grad_wait()
        self.inflight.clear()
        if self.devstep is not None:
            self.devstep.settle()

    # What the user sees --------------------------------------------------
    def grads(self) -> Dict[str, torch.Tensor]:
        """Accumulated gradients by parameter name (fp32, host, zero-copy)."""
        self.wait()
        out = {}
        for g in self.off.groups:
            acc, _ = self.off.pager.grads(g.index)
            for name, a in acc.items():
                if a is not None:
                    out[name] = torch.from_numpy(a)
        return out

    def zero_grad(self) -> None:
        self.wait()
        self.off.pager.grad_zero()
        self.zeroed.update(g.index for g in self.off.groups)
        # As torch's zero_grad: the .grad bound to the accumulators goes, so
        # nothing reads what they held before the next backward refills them.
        for g in self.off.groups:
            self._bind_layer(g, {}, 0, zero=False)

    # Masters and the optimizer -------------------------------------------
    def named_parameters(self) -> List[Tuple[str, torch.nn.Parameter]]:
        """fp32 host copies of the paged parameters (made on first use, from
        the pager's current weights) and the trainable parameters kept on
        the device as they are, for an optimizer."""
        if self.devstep is not None:
            raise ValueError("this model's layers step on the device inside the backward "
                             "(step_in_backward): it has no host masters")
        if self.masters is None:
            self._make_masters()
        # In the model's own parameters() order: a global gradient norm then
        # sums in the same order as on the resident model.
        out = []
        for name, p in self.off.model.named_parameters():
            hit = self.by_param.get(id(p))
            if hit is not None:
                g, i = hit
                out.append((name, self.masters[g.index][i]))
            elif id(p) in self.stacked:   # routed experts: each expert's masters
                from ._experts import masters_of
                x, attr = self.stacked[id(p)]
                out += [(f"{name}.{suffix}", mp) for suffix, mp in
                        masters_of(x, attr, self.masters)]
            elif p.requires_grad:    # kept on the device: trains as it is
                out.append((name, p))
        return out

    def _make_masters(self) -> None:
        off = self.off
        masters: Dict[int, List[Optional[torch.nn.Parameter]]] = {}
        for g in off.groups:
            off.acquire(g)
            try:
                row = []
                for _, name, dtype, shape in g.params:
                    if not dtype.is_floating_point:
                        row.append(None)
                        continue
                    v = off._view(g, g.layer, name, dtype, shape)
                    row.append(torch.nn.Parameter(v.detach().to("cpu", torch.float32, copy=True)))
                masters[g.index] = row
            finally:
                off.release(g)
        self.masters = masters
        self.master_ids = {id(m) for row in masters.values() for m in row if m is not None}

    def _owned_by(self, opt) -> List[Tuple[object, int]]:
        """(group, position) of the model's own paged parameters `opt` holds."""
        ids = {id(p) for group in opt.param_groups for p in group["params"]}
        return [(g, i) for g in self.off.groups for i in self.own.get(g.index, ())
                if id(g.params[i][0]) in ids]

    def refuse_placeholders(self, opt) -> None:
        """An optimizer over the stacked parameter of routed experts (one
        placeholder for all, whose experts train as layers of their own)
        would step nothing, silently; nor can one step paged weights with
        step_in_backward chosen (no host masters): say so, and what to do."""
        ids = {id(p) for group in opt.param_groups for p in group["params"]}
        stacked = [x for i, (x, _) in self.stacked.items() if i in ids]
        if stacked:
            raise RuntimeError(
                f"this optimizer holds {len(stacked)} stacked parameters of routed experts of "
                "an offloaded model: each expert trains as a layer of its own, and a stacked "
                "parameter has no master.  Build the optimizer over "
                "wspager.torch.parameters(model) (every expert's fp32 host master, and the "
                "other parameters), not model.parameters().")
        if self.devstep is not None and self._owned_by(opt):
            raise RuntimeError(
                "this optimizer holds paged parameters of a model whose layers step inside "
                "the backward (wspager.torch.step_in_backward): they have no host masters; "
                "use the object step_in_backward returned")

    def steps_with(self, opt) -> bool:
        return any(id(p) in self.master_ids for group in opt.param_groups
                   for p in group["params"]) or bool(self._owned_by(opt))

    def _set_own_grad(self, p: torch.nn.Parameter, grad: Optional[torch.Tensor]) -> None:
        """p.grad = grad, a host fp32 accumulator, while p's data is a
        placeholder of another dtype or device (torch checks a .grad against
        the data: for the moment of the assignment, the data is `grad`)."""
        if grad is None:
            p.grad = None
            self.own_bound.discard(id(p))
            return
        if p.grad is grad:     # bound after the last backward, and kept
            self.own_bound.add(id(p))
            return
        data = p.data
        p.data = grad
        p.grad = grad
        p.data = data
        self.own_bound.add(id(p))

    def _own_dropped(self, g) -> bool:
        """The user set a .grad we bound on g's own parameters to None."""
        return g.index in self.dropped or any(
            id(g.params[i][0]) in self.own_bound and g.params[i][0].grad is None
            for i in self.own.get(g.index, ()))

    def enter_step(self, opt) -> bool:
        """Whether opt's step is the outermost: an optimizer may step
        another inside its own (torch's ZeroRedundancyOptimizer steps each
        rank's share with an inner one, then broadcasts it).  The outer
        step binds the gradients and, after the broadcast, applies the
        masters to the layers, once.  A step that raised leaves opt on
        the stack; seen again, the stack is stale and starts over."""
        if opt in self.stepping:
            self.stepping.clear()
        self.stepping.append(opt)
        return len(self.stepping) == 1

    def leave_step(self, opt) -> bool:
        """Whether opt's step, now ending, was the outermost."""
        if not self.stepping or self.stepping[-1] is not opt:
            self.stepping.clear()   # not entered through enter_step: as before
            return True
        self.stepping.pop()
        return not self.stepping

    def before_step(self, opt) -> None:
        """Gradients bound for the step.  For an optimizer over the model's
        own paged parameters (transformers' Trainer: model.parameters()),
        each holds its fp32 host master's data for the step, its .grad the
        accumulator: the optimizer steps the masters, as over
        parameters(), and keeps its state by the parameters it was given."""
        owned = self._owned_by(opt)
        if owned and self.masters is None:
            self._make_masters()     # before binding: fresh masters have no .grad
        self.bind_grads()
        for g, i in owned:
            p = g.params[i][0]
            self.lent.append((p, p.data))
            p.data = self.masters[g.index][i].data

    def take_back_masters(self) -> None:
        """After the step: the placeholders again (the .grad stay)."""
        for p, data in self.lent:
            p.data = data
        self.lent.clear()

    def bind_grads(self) -> None:
        """Masters' .grad: views of the accumulators (None: no gradient).
        An expert no token was routed to has a zero gradient when any
        expert of its module has one: the resident model's stacked
        parameter has a gradient for every expert (zero for the unrouted),
        and its optimizer steps them all.

        Each layer is bound once its own pushes are in (pager.grads waits
        for them), in the order they were pushed: at the end of a backward
        the host is far ahead of the device, so this work is done while the
        last layers' gradients still land, not after."""
        grads = {}
        pushed = self.pushed_since_bind
        order = [g for g in self.off.groups if g.index not in pushed]
        by_index = {g.index: g for g in self.off.groups}
        order += [by_index[i] for i in pushed if i in by_index]
        for g in order:
            acc, pushes = self.off.pager.grads(g.index)
            # .grad set to None since, and no push after: the accumulators
            # hold gradients the user already let go (a layer that had
            # none in this window: a routed expert no token chose)
            ms = self.masters[g.index] if g.index in self.masters_bound else None
            if pushes and g.index not in self.pushed_since_bind and (
                    self._own_dropped(g) or
                    (ms is not None and all(m is None or m.grad is None for m in ms))):
                self.off.pager.grad_zero(g.index)    # as .grad = None says
                self.zeroed.add(g.index)
                acc, pushes = self.off.pager.grads(g.index)
            grads[g.index] = (acc, pushes)
            if pushes or getattr(g, "experts", None) is None:
                self._bind_layer(g, acc, pushes, zero=False)
        self.wait()   # all in already: drops the gradients kept for their copies
        self.pushed_since_bind.clear()
        # Experts with no gradient, once every layer's pushes are known.
        active = {id(g.experts) for g in self.off.groups
                  if getattr(g, "experts", None) is not None and grads[g.index][1]}
        for g in self.off.groups:
            acc, pushes = grads[g.index]
            if not pushes and getattr(g, "experts", None) is not None:
                self._bind_layer(g, acc, pushes, zero=id(g.experts) in active)
        self.dropped.clear()

    def _bind_layer(self, g, acc, pushes: int, zero: bool) -> None:
        """The .grad of g's own paged parameters and of its masters: views
        of its accumulators `acc` (None without `pushes`; with `zero`,
        zeros for the masters instead)."""
        for i in self.own.get(g.index, ()):
            p, name, _, _ = g.params[i]
            a = acc.get(name) if pushes else None
            self._set_own_grad(p, self._acc_tensor(g.index, name, a))
        if self.masters is None:
            return
        for (_, name, _, _), m in zip(g.params, self.masters[g.index]):
            if m is None:
                continue
            a = acc.get(name) if pushes else None
            t = self._acc_tensor(g.index, name, a)
            if t is None and zero:
                t = torch.zeros_like(m)
            if m.grad is not t:
                m.grad = t
            if t is not None:
                self.masters_bound.add(g.index)

    def _acc_tensor(self, layer: int, name: str, a) -> Optional[torch.Tensor]:
        """The tensor over accumulator view `a` (None: None), the one made
        for it before when the pager handed out the same view."""
        if a is None:
            return None
        known = self.acc_tensors.get((layer, name))
        if known is not None and known[0] is a:
            return known[1]
        t = torch.from_numpy(a)
        self.acc_tensors[(layer, name)] = (a, t)
        return t

    def apply_masters(self) -> None:
        """The stepped masters, in each tensor's dtype, become the layer.
        Only layers with gradients: an optimizer leaves the others as they
        are, and a step on one task's module writes only that module."""
        off = self.off
        for g in off.groups:
            row = self.masters[g.index]
            if all(m is None or m.grad is None for m in row) and \
                    all(g.params[i][0].grad is None for i in self.own.get(g.index, ())):
                continue
            pos = self.pos[g.index]
            vals: List[Optional[int]] = [None] * len(pos)
            keep = []
            # fp32 masters of F32 and BF16 tensors go as they are: the pager
            # narrows them in its copy (one pass over memory, on every core)
            narrow = all(m is None or (dtype in _NARROWED and m.dtype == torch.float32 and
                                       m.is_contiguous())
                         for (_, _, dtype, _), m in zip(g.params, row))
            for (_, name, dtype, _), m in zip(g.params, row):
                if m is None:
                    continue
                t = m.detach() if narrow else m.detach().to(dtype).contiguous()
                vals[pos[name]] = t.data_ptr()
                keep.append(t)
            if narrow:
                off.pager.update_f32(g.index, vals)
            else:
                off.pager.update(g.index, vals)   # copied before it returns

    def step_in_backward(self, optimizer, kwargs, clip_per_layer=None):
        if self.gsum is not None:
            raise NotImplementedError("step_in_backward with a process group: each layer "
                                      "would step before its gradients are summed over the "
                                      "ranks; use an optimizer over the model's parameters")
        if self.masters is not None:
            raise ValueError("wspager.torch.parameters() (or an optimizer step over the "
                             "model's parameters) already made host masters; "
                             "step_in_backward steps on the device instead: use one or the "
                             "other")
        for g in self.off.groups:     # no .grad of ours on the model's parameters
            for i in self.own.get(g.index, ()):
                self._set_own_grad(g.params[i][0], None)
        if self.devstep is None:
            from ._devstep import StepInBackward
            self.devstep = StepInBackward(self, optimizer, kwargs, clip_per_layer)
        return self.devstep

    def save(self, out, force: bool = False, progress=None) -> None:
        self.wait()
        self.off.pager.save(out, force=force, progress=progress)
