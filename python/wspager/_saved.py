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
  adapters): the layer is acquired for as long as the unpacked tensor
  lives, i.e. while autograd uses it, and released when autograd drops it
  (on the stream current then, after the work that read it).

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
        base = t if t._base is None else t._base
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
            self.off.acquire(g)
        _, name, dtype, shape = g.params[s.i]
        v = self.off._view(g, g.layer, name, dtype, shape)
        want = g.placeholders[s.i].dtype
        if v.dtype != want:     # a weight cast at each use is cast again
            v = v.to(want)
        out = v.as_strided(s.shape, s.stride, v.storage_offset() + s.offset)
        if not s.trained:
            weakref.finalize(out, self.off.release, g)
        return out
