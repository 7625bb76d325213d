"""Binding a model to its pager: what the plan keeps is read once onto the
device, each paged parameter becomes a placeholder of its group, and each
module whose forward uses a group gets a :class:`PagedModuleHook`."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from . import _experts, _plan
from ._offload import Group, Offload
from ._plan import TORCH_DTYPES, Placeholders, inside


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


def replace(owners, p: torch.nn.Parameter, data: torch.Tensor,
            requires_grad: Optional[bool] = None) -> torch.nn.Parameter:
    """A new Parameter over `data` in place of `p` in every module holding
    it (tied weights stay tied).  Assigning .data cannot take a meta
    parameter to another device; a new Parameter can.  It keeps `p`'s
    requires_grad unless told (torch.matmul picks its algorithm by a
    weight's requires_grad, even under no_grad: the flag is part of running
    the model exactly as transformers does)."""
    if requires_grad is None:
        requires_grad = p.requires_grad and data.is_floating_point()
    new = torch.nn.Parameter(data, requires_grad=requires_grad)
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
    current stream.  Over several devices its inputs first move to its
    groups' device, as Accelerate's AlignDevicesHook moves them."""

    def __init__(self, off: Offload, groups: List[Group], align: bool = False):
        self.off, self.groups = off, groups
        self.device = off.where(groups[0].index)[1] if align else None

    def pre_forward(self, _module, args, kwargs):
        trainer = self.off.trainer
        for g in self.groups:
            if trainer is not None and torch.is_grad_enabled():
                trainer.strip(g)
            self.off.acquire(g)
        if self.device is not None:
            return to_device((args, kwargs), self.device)
        return None

    def post_forward(self, _module, _args, _output) -> None:
        for g in reversed(self.groups):
            self.off.release(g)

    def attach(self, module: torch.nn.Module) -> list:
        """Hook `module`; returns the handles."""
        return [module.register_forward_pre_hook(self.pre_forward, with_kwargs=True),
                module.register_forward_hook(self.post_forward, always_call=True)]


def to_device(x, device: torch.device):
    """x with every tensor in it (in tuples, lists, dicts and transformers'
    ModelOutput) on `device`; anything else (a cache object) as it is."""
    if isinstance(x, torch.Tensor):
        return x if x.device == device else x.to(device)
    if isinstance(x, tuple) and hasattr(x, "_fields"):   # a namedtuple
        return type(x)(*(to_device(v, device) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(to_device(v, device) for v in x)
    if isinstance(x, dict):
        if type(x) is dict:
            return {k: to_device(v, device) for k, v in x.items()}
        for k in list(x.keys()):     # ModelOutput and other dict types: in place
            x[k] = to_device(x[k], device)
        return x
    return x


def _align_devices(model: torch.nn.Module, off: Offload, modules: Dict[str, torch.nn.Module],
                   hooked: set) -> None:
    """Over several devices: modules that are not paged but hold tensors on
    a device other than the first get their inputs moved there (resident
    layers of a later device), and the model's outputs come back to the
    device its inputs were on, as Accelerate's dispatch does."""
    first = off.device
    for path, m in modules.items():
        if id(m) in hooked or m is model:
            continue
        own = list(m._parameters.values()) + list(m._buffers.values())
        devs = {t.device for t in own if t is not None and t.device.type != "meta"}
        if len(devs) == 1 and devs != {first}:
            d = devs.pop()
            off.handles.append(m.register_forward_pre_hook(
                lambda _m, a, k, d=d: to_device((a, k), d), with_kwargs=True))
    came = []

    def remember(_m, args, kwargs):
        ts = [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
        del came[:-8]      # entries of forwards that raised: never popped
        came.append(ts[0].device if ts else first)

    def give_back(_m, _args, _kwargs, out):
        return to_device(out, came.pop() if came else first)
    off.handles.append(model.register_forward_pre_hook(remember, with_kwargs=True))
    off.handles.append(model.register_forward_hook(give_back, with_kwargs=True))


def _owner(name: str) -> str:
    """The module path of parameter or buffer `name`."""
    return name.rsplit(".", 1)[0] if "." in name else ""


def bind(model: torch.nn.Module, off: Offload, plan: "_plan.Plan") -> None:
    """Bind `model` to `off` as `plan` says: kept tensors read once onto
    their device, converted and routed-experts parameters made, everything
    else moved to its device, each paged parameter replaced by its group's
    placeholder and each module using a group hooked.  The device of a
    tensor is ``off.device_for`` its module (one device, or its unit's)."""
    owners = param_owners(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = module_names(model)
    # Kept tensors (buffers, resident parameters) and converted parameters:
    # read once, cast to the model's dtype as transformers casts them.
    for index, entries in plan.kept.items():
        pager, dev = off.where(index)
        with pager.acquire(index, off._stream(dev)) as layer:
            for e in entries:
                value = _read(off, layer, e).to(off.device_for(_owner(e.name)), e.dtype,
                                                copy=True)
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
                pager, dev = off.where(e.layer.index)
                with pager.acquire(e.layer.index, off._stream(dev)) as layer:
                    tensors[pattern].append(_read(off, layer, e).to(
                        off.device_for(_owner(name)), e.dtype, copy=True))
        made = off.names.convert(converter, name, tensors)
        for target, value in made.items():
            if target in params:
                replace(owners, params[target], value)
    placeholder = Placeholders()
    for x in plan.experts:
        _experts.bind(off, x, off.names, owners, replace, Group, placeholder)
    # Everything not paged goes to its device as it is (buffers such as
    # rotary inv_freq, parameters kept resident).
    params = dict(model.named_parameters(remove_duplicate=False))
    paged_ids = {id(params[e.name]) for es in plan.paged.values() for e in es}
    for name, p in params.items():
        d = off.device_for(_owner(name))
        if id(p) not in paged_ids and p.device != d:
            replace(owners, p, p.data.to(d))
    for mname, m in modules.items():
        d = off.device_for(mname)
        for bname, b in list(m._buffers.items()):
            if b is not None and b.device != d and b.device.type != "meta":
                m._buffers[bname] = b.to(d)
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
            ph = placeholder(tuple(t.shape), e.dtype, off.where(index)[1])
            p = replace(owners, old, ph)
            g.params.append((p, t.name, TORCH_DTYPES[t.dtype], tuple(t.shape)))
            g.placeholders.append(ph)
        off.groups.append(g)
        for mpath in sorted(users):
            m = modules[mpath]
            hooks.setdefault(id(m), (m, []))[1].append(g)
    off.hooked = [m for m, _ in hooks.values()] + [m for m, _ in off.experts]
    several = len(off.pagers) > 1
    for m, groups in hooks.values():
        off.handles += PagedModuleHook(off, groups, several).attach(m)
    if several:
        _align_devices(model, off, modules, {id(m) for m, _ in hooks.values()})
