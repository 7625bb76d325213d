"""Paged weights used outside their module's call, found in the first
forward.

A paged weight is bound to its slot only while a hooked module's forward
runs.  Some models use a weight without calling its module: ProphetNet's
decoder indexes ``self.ngram_embeddings.weight`` itself and calls
``self.position_embeddings._forward(...)``, which skips the module's
hooks; RWKV rescales some weights in place at its first evaluation
forward.  Such a use would see the placeholder (NaN), or be refused by
torch (a write into it).  During the model's first forward a torch
function mode looks at the arguments of every torch operation; a paged
parameter whose layer is not bound there is such a use.  Its layer is
then kept on the device for good (copied out of the slot:
:meth:`wspager._offload.Offload.keep`) before the operation runs, with a
notice, so that the first forward and every later one compute what
transformers computes.  Where the pager must see every use of a layer
(training it, or a process group exchanging it in a fixed order) the use
is an error naming the layer and ``resident=`` instead.

Only operations that read or write values count: attribute access
(``.data``, ``.shape``, ``.dtype``), ``requires_grad_`` and the metadata
methods below touch none.  Only the first forward is watched (its cost: a
Python call per operation); a use that only later forwards make still
sees NaN.
"""
from __future__ import annotations

import logging

import torch
from torch.overrides import TorchFunctionMode

logger = logging.getLogger("wspager")

# Tensor methods that read no values.
_METADATA = {"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
             "is_contiguous", "data_ptr", "element_size", "get_device", "is_floating_point",
             "is_complex", "requires_grad_", "__len__", "untyped_storage", "type"}


def _reads_values(func) -> bool:
    name = getattr(func, "__name__", "")
    return name not in ("__get__", "__set__", "__delete__") and name not in _METADATA


class _Watch(TorchFunctionMode):
    def __init__(self, off):
        super().__init__()
        self.off = off

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _reads_values(func):
            for a in list(args) + list(kwargs.values()):
                for t in (a if isinstance(a, (list, tuple)) else (a,)):
                    if isinstance(t, torch.Tensor):
                        hit = self.off.saved.by_param.get(id(t))
                        if hit is not None and hit[0].depth == 0:
                            self._read_outside(hit[0], hit[1])
        return func(*args, **kwargs)

    def _read_outside(self, g, i: int) -> None:
        """Parameter i of group g is read while its layer is not bound."""
        off = self.off
        name = g.params[i][1]
        if off.trainer is not None or off.feed is not None:
            raise RuntimeError(
                f"wspager: the model uses {name} outside the forward of the module holding "
                f"it, so the pager cannot bind it there; with "
                f"{'train=True' if off.trainer is not None else 'a process group'} every use "
                f"must go through the pager: offload with resident=[{g.name!r}]")
        off.keep(g)
        logger.warning("wspager: the model uses %s outside the forward of the module holding "
                       "it; layer %s is kept on %s from now on (resident=[%r] says so from the "
                       "start)", name, g.name, off.where(g.index)[1], g.name)


class FirstForward:
    """Watches the model's first forward (:class:`_Watch`), then removes
    itself."""

    def __init__(self, off):
        self.off = off
        self.mode = None
        self.handles = []

    def _enter(self, _mod, _args):
        self.mode = _Watch(self.off)
        self.mode.__enter__()

    def _exit(self, _mod, _args, _out):
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
        for h in self.handles:
            h.remove()

    def attach(self, model: torch.nn.Module) -> list:
        self.handles = [model.register_forward_pre_hook(self._enter),
                        model.register_forward_hook(self._exit, always_call=True)]
        return list(self.handles)
