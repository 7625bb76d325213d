"""Paged weights that autograd keeps for the backward.

A paged parameter is a view of slot memory only between its module's
pre-hook and forward hook; autograd keeps the weights an operation needs
for its backward (a linear layer keeps its weight to compute its input's
gradient), and the slot is reused long before the backward runs.  While
the model's forward runs with gradients enabled, saved tensors that are
(views of) paged parameters are saved as handles instead (saved-tensor
hooks).  When the backward unpacks one:

* a weight being trained (``train=True`` and ``requires_grad``): the
  trainer re-acquires its layer for the rest of the backward and releases
  it once the layer's gradients have left (:mod:`wspager._train`);
* a frozen weight (any other: inference models, the base model under LoRA
  adapters): the layer is acquired at its first unpack and held while
  autograd uses any of its unpacked weights; it is released once none is
  alive and the backward has moved on to another layer, or at the end of
  the backward (on the stream current then, after the work that read it).
  One acquire per layer per backward, in the backward's order: the
  pattern the pager's read-ahead learns.

So gradients flow to the inputs of paged modules (and to adapters, heads
or anything else trained around them) whether or not the paged weights
themselves train, and the device holds only the layers in use.
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Tuple

import torch


class Saved:
    """A saved tensor that is (a view of) paged parameter i of a group."""
    __slots__ = ("g", "i", "shape", "stride", "offset", "trained")

    def __init__(self, g, i: int, shape, stride, offset: int, trained: bool):
        self.g, self.i, self.shape, self.stride, self.offset = g, i, shape, stride, offset
        self.trained = trained


class SavedWeights:
    """The saved-tensor hooks of one offloaded model (``off.saved``)."""

    def __init__(self, off, model: torch.nn.Module):
        self.off = off
        self.trainer = None        # the _train.Trainer, with train=True
        self.by_param: Dict[int, Tuple[object, int]] = {}
        for g in off.groups:
            for i, (p, _, _, _) in enumerate(g.params):
                self.by_param[id(p)] = (g, i)
        self.ctx: List[object] = []
        # frozen layers held for the backward: index -> [group, unpacked
        # weights alive]; the callback at the backward's end is queued
        self.held: Dict[int, list] = {}
        self.alive: Dict[weakref.ref, int] = {}   # unpacked frozen weights -> layer
        self.end_queued = False
        off.handles.append(model.register_forward_pre_hook(self._enter))
        off.handles.append(model.register_forward_hook(self._exit, always_call=True))

    def _enter(self, _mod, _args):
        if torch.is_grad_enabled():
            ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            ctx.__enter__()
            self.ctx.append(ctx)
        else:
            self.ctx.append(None)

    def _exit(self, _mod, _args, _out):
        ctx = self.ctx.pop() if self.ctx else None
        if ctx is not None:
            ctx.__exit__(None, None, None)

    def _pack(self, t: torch.Tensor):
        base = t._base
        if base is None:
            base = t
        hit = self.by_param.get(id(base))
        if hit is None:
            return t
        g, i = hit
        p = g.params[i][0]
        if base is not p:
            return t
        return Saved(g, i, tuple(t.shape), t.stride(), t.storage_offset() - p.storage_offset(),
                     p.requires_grad and self.trainer is not None)

    def _unpack(self, s):
        if not isinstance(s, Saved):
            return s
        g = s.g
        if s.trained:
            self.trainer.hold(g)
        else:
            self._hold_frozen(g)
        v = self.off.slot_views(g)[s.i]
        want = g.placeholders[s.i].dtype
        if v.dtype != want:     # a weight cast at each use is cast again
            v = v.to(want)
        out = v.as_strided(s.shape, s.stride, v.storage_offset() + s.offset)
        if not s.trained:
            self.held[g.index][1] += 1
            # told when autograd drops it (a weakref's callback: a third of
            # what weakref.finalize costs, and this runs for every weight)
            self.alive[weakref.ref(out, self._gone)] = g.index
        return out

    def _gone(self, ref) -> None:
        index = self.alive.pop(ref, None)
        if index is not None:
            self._dropped(index)

    def _hold_frozen(self, g) -> None:
        if not self.end_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
            self.end_queued = True
        for index, (h, alive) in list(self.held.items()):
            if index != g.index and alive == 0:    # the backward has left it
                del self.held[index]
                self.off.release(h)
        if g.index not in self.held:
            self.off.acquire(g)
            self.held[g.index] = [g, 0]

    def _dropped(self, index: int) -> None:
        """Autograd dropped an unpacked weight of layer `index`."""
        entry = self.held.get(index)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0 and not self.end_queued:   # the backward is over
            del self.held[index]
            self.off.release(entry[0])

    def _end_backward(self) -> None:
        self.end_queued = False
        for index, (g, alive) in list(self.held.items()):
            if alive == 0:     # the rest go when autograd drops them
                del self.held[index]
                self.off.release(g)
