"""Binding a model to its pager: what the plan keeps is read once onto the
device, each paged parameter becomes a placeholder of its group, and each
module whose forward uses a group gets a :class:`PagedModuleHook`."""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from . import _experts, _plan
from ._offload import Group, Offload
from ._plan import TORCH_DTYPES, inside, placeholder


def module_names(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    return dict(model.named_modules(remove_duplicate=False))


def param_owners(model: torch.nn.Module) -> Dict[int, List[Tuple[str, torch.nn.Module, str]]]:
    """id(parameter) -> every (module path, module, attribute) holding it
    directly: tied weights appear under several modules."""
    out: Dict[int, List[Tuple[str, torch.nn.Module, str]]] = {}
    for mname, m in model.named_modules(remove_duplicate=False):
        for pname, p in m.named_parameters(recurse=False):
            out.setdefault(id(p), []).append((mname, m, pname))
    return out


def replace(owners, p: torch.nn.Parameter, data: torch.Tensor) -> torch.nn.Parameter:
    """A new Parameter over `data` in place of `p` in every module holding
    it (tied weights stay tied).  Assigning .data cannot take a meta
    parameter to another device; a new Parameter can."""
    new = torch.nn.Parameter(data, requires_grad=False)
    for _, m, attr in owners.get(id(p), []):
        m._parameters[attr] = new
    return new


def _read(off: Offload, layer, e: "_plan.Entry") -> torch.Tensor:
    """Pack tensor `e` of the held `layer`, as a view, in its pack dtype."""
    t = e.tensor
    return off._span(off.group_for(e.layer.index), layer.address(t.name), t.nbytes,
                     TORCH_DTYPES[t.dtype], tuple(t.shape))


class PagedModuleHook:
    """What one hooked module does around its forward, as Accelerate's
    ModelHook: acquire its groups before (taking the accumulators off the
    model's own .grad first when the forward may be backpropagated,
    :meth:`wspager._train.Trainer.strip`), release them after, on the
    current stream."""

    def __init__(self, off: Offload, groups: List[Group]):
        self.off, self.groups = off, groups

    def pre_forward(self, _module, _args, _kwargs=None) -> None:
        trainer = self.off.trainer
        for g in self.groups:
            if trainer is not None and torch.is_grad_enabled():
                trainer.strip(g)
            self.off.acquire(g)

    def post_forward(self, _module, _args, _output) -> None:
        for g in reversed(self.groups):
            self.off.release(g)

    def attach(self, module: torch.nn.Module) -> list:
        """Hook `module`; returns the handles."""
        return [module.register_forward_pre_hook(self.pre_forward),
                module.register_forward_hook(self.post_forward, always_call=True)]


def bind(model: torch.nn.Module, off: Offload, plan: "_plan.Plan", dev: torch.device) -> None:
    """Bind `model` to `off` as `plan` says: kept tensors read once onto
    `dev`, converted and routed-experts parameters made, everything else
    moved to `dev`, each paged parameter replaced by its group's
    placeholder and each module using a group hooked."""
    owners = param_owners(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = module_names(model)
    # Kept tensors (buffers, resident parameters) and converted parameters:
    # read once, cast to the model's dtype as transformers casts them.
    for index, entries in plan.kept.items():
        with off.pager.acquire(index, off._stream()) as layer:
            for e in entries:
                value = _read(off, layer, e).to(dev, e.dtype, copy=True)
                if e.name in params:
                    replace(owners, params[e.name], value)
                else:
                    owner, attr = e.name.rsplit(".", 1) if "." in e.name else ("", e.name)
                    modules[owner]._buffers[attr] = value
            if dev.type == "cuda":
                torch.cuda.current_stream(dev).synchronize()   # before the slot is reused
    for name, (converter, sources) in plan.converted.items():
        tensors = {}
        for pattern, entries in sources.items():
            tensors[pattern] = []
            for e in entries:
                with off.pager.acquire(e.layer.index, off._stream()) as layer:
                    tensors[pattern].append(_read(off, layer, e).to(dev, e.dtype, copy=True))
        made = off.names.convert(converter, name, tensors)
        for target, value in made.items():
            if target in params:
                replace(owners, params[target], value)
    for x in plan.experts:
        _experts.bind(off, x, off.names, owners, replace, Group)
    # Everything not paged goes to the device as it is (buffers such as
    # rotary inv_freq, parameters kept resident).
    params = dict(model.named_parameters(remove_duplicate=False))
    paged_ids = {id(params[e.name]) for es in plan.paged.values() for e in es}
    for name, p in params.items():
        if id(p) not in paged_ids and p.device != dev:
            replace(owners, p, p.data.to(dev))
    for mname, m in modules.items():
        for bname, b in list(m._buffers.items()):
            if b is not None and b.device != dev and b.device.type != "meta":
                m._buffers[bname] = b.to(dev)
    # Paged layers: a group each, hooked on the deepest module holding all
    # its parameters and on every module outside it that holds one of them
    # (tied weights).
    hooks: Dict[int, Tuple[torch.nn.Module, List[Group]]] = {}
    for index, entries in plan.paged.items():
        L = plan.layers[index]
        g = Group(index, L.name)
        home = _plan.home(L.name, [e.name for e in entries], modules)
        users = {home}
        for e in entries:
            old = params[e.name]
            for mpath, _, _ in owners.get(id(old), []):
                if not inside(mpath, home):
                    users.add(mpath)
            t = e.tensor
            ph = placeholder(tuple(t.shape), e.dtype, dev)
            p = replace(owners, old, ph)
            g.params.append((p, t.name, TORCH_DTYPES[t.dtype], tuple(t.shape)))
            g.placeholders.append(ph)
        off.groups.append(g)
        for mpath in sorted(users):
            m = modules[mpath]
            hooks.setdefault(id(m), (m, []))[1].append(g)
    off.hooked = [m for m, _ in hooks.values()] + [m for m, _ in off.experts]
    for m, groups in hooks.values():
        off.handles += PagedModuleHook(off, groups).attach(m)
