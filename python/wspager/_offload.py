"""The state of an offloaded model (``model._wspager``): its pager, its
groups (a pack layer each: the module parameters it holds and the views
over the slot it is in), and acquiring and releasing a group on the current
stream, binding its parameters to zero-copy views of the slot and back to
their placeholders.  Over several devices, each pack layer has a home: the
pager of its device (one a device, each reading only its own layers) and
the device (:meth:`Offload.where`)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch

from . import Pager


class Group:
    """One pack layer: its parameters and the views over its slot."""

    def __init__(self, index: int, name: str):
        self.index, self.name = index, name
        self.params: List[Tuple[torch.nn.Parameter, str, torch.dtype, Tuple[int, ...]]] = []
        self.depth = 0            # hooks holding it now (nested uses)
        self.layer = None         # the AcquiredLayer while held
        self.views: Dict[Tuple[int, str], torch.Tensor] = {}   # (slot address, name) -> view
        # the tensors' addresses in a slot -> the views of params there
        self.slot_views: Dict[Tuple[int, ...], List[torch.Tensor]] = {}
        self.placeholders: List[torch.Tensor] = []
        self.frozen: List[torch.nn.Parameter] = []   # made frozen for this use (acquire)
        self.kept = False         # bound for good to a copy of its own (Offload.keep)


class Offload:
    """What :func:`offload` attached to a model (``model._wspager``)."""

    def __init__(self, model: torch.nn.Module, pager: Pager, device: torch.device):
        self.model, self.pager, self.device = model, pager, device
        self.groups: List[Group] = []
        self.handles = []
        self.restore = []          # (module, attribute) set on the instance
        self.trainer = None        # wspager._train.Trainer with train=True
        self.experts = []          # (stacked-experts module, its _plan.Experts)
        self.hooked: List[torch.nn.Module] = []   # modules whose forward acquires
        self.names = None          # _hf.Names of the model
        self.saved = None          # _saved.SavedWeights: weights autograd keeps
        self.by_index: Dict[int, Group] = {}     # views of layers read outside hooks
        self.pagers: List[Pager] = [pager]
        self.feed = None           # _group.GroupFeed with a process group
        self.pack_path = None      # the pack's directory
        # several devices: pack layer -> (its pager, its device), and module
        # path -> the device of the unit it belongs to
        self.homes: Dict[int, Tuple[Pager, torch.device]] = {}
        self.path_device: Optional[Callable[[str], torch.device]] = None

    def where(self, index: int) -> Tuple[Pager, torch.device]:
        """The pager that serves pack layer `index` and the device it is on."""
        return self.homes.get(index, (self.pager, self.device))

    def device_for(self, path: str) -> torch.device:
        """The device of module path `path` (its unit's, over several)."""
        return self.path_device(path) if self.path_device is not None else self.device

    def group_for(self, index: int) -> "Group":
        """A group holding views of pack layer `index` for reads outside the
        hooks (kept tensors, experts): views are cached per group."""
        g = self.by_index.get(index)
        if g is None:
            g = self.by_index[index] = Group(index, "")
        return g

    def _stream(self, device: Optional[torch.device] = None) -> int:
        d = device if device is not None else self.device
        if d.type == "cuda":
            return current_raw_stream(d)
        return 0

    def _view(self, g: Group, layer, name: str, dtype: torch.dtype, shape) -> torch.Tensor:
        return self._span(g, layer.address(name), layer.info(name).nbytes, dtype, shape)

    def _span(self, g: Group, ptr: int, nbytes: int, dtype: torch.dtype, shape) -> torch.Tensor:
        """A tensor over `nbytes` of slot memory at `ptr` (no copy)."""
        key = (ptr, nbytes, dtype, tuple(shape))
        t = g.views.get(key)
        if t is not None:
            return t
        pager, dev = self.where(g.index)
        if nbytes == 0:
            t = torch.empty(shape, dtype=dtype, device=dev)
        elif dev.type == "cuda":
            raw = torch.as_tensor(_CudaBytes(ptr, nbytes, pager._view_owner()), device=dev)
            t = raw.view(dtype).view(shape)
        else:
            buf = pager._host_buffer(ptr, nbytes)
            t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(shape)
        # Slots never move: the same layer in the same slot reuses its views.
        g.views[key] = t
        return t

    def slot_views(self, g: Group) -> List[torch.Tensor]:
        """The views of held group `g`'s parameters over its slot, in the
        pack's dtypes: made the first time the layer lands in that slot (an
        acquire is on the forward's path), then reused."""
        layer = g.layer
        views = g.slot_views.get(layer.addresses)
        if views is None:
            views = g.slot_views[layer.addresses] = [
                self._view(g, layer, name, dtype, shape) for _, name, dtype, shape in g.params]
        return views

    def acquire(self, g: Group, routed: bool = False) -> None:
        if g.kept:
            return
        g.depth += 1
        if g.depth > 1:
            return
        pager, dev = self.where(g.index)
        try:
            if self.feed is not None:   # data parallel: the ranks exchange it
                self.feed.need(g.index)
            layer = pager.acquire(g.index, self._stream(dev), routed=routed)
        except BaseException:
            g.depth -= 1   # nothing held: the release that follows has nothing to do
            raise
        g.layer = layer
        for (p, _, _, _), ph, v in zip(g.params, g.placeholders, self.slot_views(g)):
            # a weight the model keeps in another dtype: cast on the device,
            # as transformers casts it at load
            p.data = v if v.dtype == ph.dtype else v.to(ph.dtype)
        if self.trainer is None and torch.is_grad_enabled():
            # Without train=True paged weights take no gradient (there is
            # nowhere to keep it): frozen while a forward records, their
            # requires_grad (transformers') given back at the release.
            g.frozen = [p for p, _, _, _ in g.params if p.requires_grad]
            for p in g.frozen:
                p.requires_grad_(False)

    def release(self, g: Group) -> None:
        if g.depth == 0:   # its acquire failed (the forward raises that), or kept
            return
        g.depth -= 1
        if g.depth > 0:
            return
        for (p, _, _, _), ph in zip(g.params, g.placeholders):
            p.data = ph
        for p in g.frozen:
            p.requires_grad_(True)
        g.frozen = []
        layer, g.layer = g.layer, None
        layer.release(self._stream(self.where(g.index)[1]))

    def keep(self, g: Group) -> None:
        """Bind group g for good to a copy of its layer on its device,
        out of the pager's slots (a weight the model uses outside its
        module's forward: wspager._probe).  Not for a group in use."""
        pager, dev = self.where(g.index)
        stream = self._stream(dev)
        layer = pager.acquire(g.index, stream)
        g.layer = layer
        try:
            for (p, _, _, _), ph, v in zip(g.params, g.placeholders, self.slot_views(g)):
                p.data = v.to(ph.dtype, copy=True)
        finally:
            g.layer = None
            g.slot_views.clear()
            g.views.clear()
            layer.release(stream)     # after the copies, on the same stream
        g.kept = True
        if self.saved is not None:    # autograd saves it as any tensor now
            for p, _, _, _ in g.params:
                self.saved.by_param.pop(id(p), None)


# The current stream's cudaStream_t: torch's own query for it, which its
# compiled kernels use, where this torch has it; else through a Stream
# object (several times the cost, paid twice on each layer visit).
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_raw_stream(device: torch.device) -> int:
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device.index)
    return torch.cuda.current_stream(device).cuda_stream


class _CudaBytes:
    """`nbytes` bytes of device memory for torch.as_tensor (no copy); torch
    keeps this object, and so `owner` (the pager's memory), alive as long
    as the tensor."""

    def __init__(self, ptr: int, nbytes: int, owner: object):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None,
                                         "stream": None}


def resolve_device(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    if d.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be cuda[:N] or cpu, not {device}")
    return d
