"""torch's data-parallel wrappers over an offloaded model.

``torch.nn.DataParallel`` (one process, several GPUs; transformers' Trainer
picks it when one process sees several GPUs) copies every module and
parameter onto each GPU at each forward.  The copies of paged parameters
are copies of their placeholders (the whole model's size on every GPU),
and the hooks of the copies bind the pager's slot to the original
parameters, not to the copies: the forward would run on placeholder
values, silently.  So a DataParallel wrapping an offloaded model is
refused when it is built (torch's module registration hook), with a
message saying what to do instead.

DDP broadcasts rank 0's parameters and buffers when it is built and then
averages, during each backward, the gradient of every parameter that
requires one - except those the wrapped module names in
``_ddp_params_and_buffers_to_ignore``, which torch reads once, in DDP's
constructor.  A paged parameter is a placeholder whose elements share one
address (the broadcast's write into it fails), and with ``train=True`` its
gradient lives in the pager's host accumulators, not in its ``.grad``.  So
an offloaded model names its paged parameters there, and DDP leaves them
to the pager:

- every rank must page the same pack: the manifests are compared over
  DDP's process group when DDP is built (as ``process_group=`` does at
  open);
- with ``train=True`` the pager averages the paged layers' gradients over
  the model's process group, or DDP's when the model has none, after each
  backward outside DDP's ``no_sync`` (:class:`wspager._group.GradientSum`);
  parameters DDP averages itself (kept resident, adapters added later) are
  left to DDP.

The names are found when DDP reads them, over the module DDP wraps: that
may be a wrapper of the offloaded model (peft's ``PeftModel`` forwards the
attribute to the model it wraps), whose names carry a prefix, and peft
renames the wrapped layers' parameters too.  DDP's constructor is found
on the stack (its own frame, whose ``self`` and ``module`` are what it is
building); read from anywhere else, the names are the model's own.
"""
from __future__ import annotations

import sys
import weakref
from typing import List, Optional, Tuple

import torch

ATTR = "_ddp_params_and_buffers_to_ignore"


def paged_ids(off) -> set:
    """The ids of the paged parameters (placeholders) of an offloaded model."""
    ids = set(off.saved.by_param)
    for m, x in off.experts:      # stacked parameters of routed experts
        ids.update(id(m._parameters[attr]) for attr in x.targets)
    return ids


def _ddp_being_built() -> Tuple[Optional[object], Optional[torch.nn.Module]]:
    """The DistributedDataParallel whose constructor is running on this
    thread, and the module it wraps; (None, None) outside one."""
    from torch.nn.parallel import DistributedDataParallel
    code = DistributedDataParallel.__init__.__code__
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is code:
            ddp, module = f.f_locals.get("self"), f.f_locals.get("module")
            return ddp, module if isinstance(module, torch.nn.Module) else None
        f = f.f_back
    return None, None


class PagedNames:
    """``model._ddp_params_and_buffers_to_ignore`` of an offloaded model:
    iterating it gives the names of the paged parameters under the module
    DDP is wrapping (and names the model had there before), and tells the
    pager that DDP is wrapping it (:func:`_joined`)."""

    def __init__(self, off, earlier: List[str]):
        self.off = weakref.ref(off)
        self.earlier = earlier

    def __iter__(self):
        off = self.off()
        if off is None:
            return iter(self.earlier)
        ddp, top = _ddp_being_built()
        if top is None or not any(m is off.model for m in top.modules()):
            top = off.model
        paged = paged_ids(off)
        names = [n for n, p in top.named_parameters(remove_duplicate=False) if id(p) in paged]
        if ddp is not None:
            _joined(off, ddp, top, paged)
        return iter(self.earlier + names)


def _joined(off, ddp, top: torch.nn.Module, paged: set) -> None:
    """DDP is being built over `top`, which holds the offloaded model: what
    that asks of the pager (raises where the pager cannot do it)."""
    from ._group import GradientSum, check_same_pack
    group = ddp.process_group
    if off.feed is None:           # process_group= compared the packs at open
        check_same_pack(group, off.pack_path)
    tr = off.trainer
    if tr is None:                 # nothing paged trains: DDP averages the rest
        return
    if off.experts:
        raise NotImplementedError(
            "DistributedDataParallel over a model training routed experts (train=True): "
            "each rank routes its own tokens, and their gradients are not averaged over "
            "ranks yet")
    if tr.devstep is not None:
        raise NotImplementedError(
            "DistributedDataParallel with wspager.torch.step_in_backward: each layer would "
            "step before its gradients are averaged over the ranks; use an optimizer over "
            "the model's parameters")
    own = {id(p) for p in top.parameters() if p.requires_grad and id(p) not in paged}
    if not own:
        small = min(off.groups, key=lambda g: sum(p.numel() for p, _, _, _ in g.params))
        raise RuntimeError(
            "wspager: every parameter this model trains is paged (train=True), so "
            "DistributedDataParallel would have none of its own to average, which torch "
            "refuses.  Leave DDP out and pass process_group= to wspager.torch.offload / "
            "from_pretrained (the pager averages the gradients as DDP would), or keep a "
            f"small layer resident for DDP to average (resident=[{small.name!r}]: "
            f"{sum(p.numel() for p, _, _, _ in small.params)} parameters).")
    if tr.gsum is None:
        tr.gsum = GradientSum(group, [])
    # what DDP averages, the pager does not; DDP's no_sync holds for both
    tr.gsum.resident = [p for p in tr.gsum.resident if id(p) not in own]
    tr.gsum.ddp = weakref.ref(ddp)


def offloaded_in(module: torch.nn.Module) -> list:
    """The offloads (``_wspager``) of the offloaded models in `module`:
    itself, or under a wrapper such as peft's."""
    return [off for m in module.modules() if (off := m.__dict__.get("_wspager")) is not None]


def _refuse_data_parallel(parent: torch.nn.Module, name: str, child: torch.nn.Module):
    """torch's module registration hook: a DataParallel over several GPUs
    taking an offloaded model (or a module holding one) raises."""
    if not isinstance(parent, torch.nn.DataParallel) or torch.cuda.device_count() < 2:
        return None
    offs = offloaded_in(child)
    if offs:
        raise RuntimeError(
            f"wspager: torch.nn.DataParallel cannot copy a paged model onto several GPUs "
            f"(its weights come from the pager's slots on {offs[0].device}; the copies would "
            f"run without them).  transformers' Trainer uses DataParallel when one process "
            f"sees several GPUs: run on one (CUDA_VISIBLE_DEVICES=N), or one process a GPU "
            f"with torchrun (DistributedDataParallel wraps a paged model).")
    return None


_REGISTRATION_HOOK = None


class _Restore:
    """A handle whose remove() puts back the names the model had."""

    def __init__(self, model: torch.nn.Module, earlier):
        self.model, self.earlier = model, earlier

    def remove(self) -> None:
        if self.earlier is None:
            self.model.__dict__.pop(ATTR, None)
        else:
            setattr(self.model, ATTR, self.earlier)


def attach(off, model: torch.nn.Module) -> List[_Restore]:
    """Name the paged parameters for DDP on `model` (and refuse
    DataParallel over it); returns the handle that takes the names off
    (wspager.torch.remove)."""
    earlier = model.__dict__.get(ATTR)
    setattr(model, ATTR, PagedNames(off, list(earlier or ())))
    global _REGISTRATION_HOOK
    if _REGISTRATION_HOOK is None:   # once a process: it sees every module registered
        from torch.nn.modules.module import register_module_module_registration_hook
        _REGISTRATION_HOOK = register_module_module_registration_hook(_refuse_data_parallel)
    return [_Restore(model, earlier)]
