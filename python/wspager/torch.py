"""Page a PyTorch model's weights through wspager.

:func:`offload` hooks an existing ``torch.nn.Module``: the module of each
pack layer (``model.layers.7``) gets a forward pre-hook that acquires the
layer on the current CUDA stream and binds the module's parameters to
zero-copy tensors over the slot memory, and a forward hook that releases it
on the same stream.  No host synchronisation in the steady state, no copy
beyond the pager's own.  :func:`from_pretrained` builds a transformers model
with no weights in memory and offloads it.

>>> import wspager.torch as wt
>>> model = wt.from_pretrained("llama-dir", device="cuda", host_cache="16G")
>>> out = model.generate(ids, max_new_tokens=32)

What a bound parameter may and may not do: between a module's pre-hook and
its forward hook, its parameters are tensors over slot memory, read-only
(the pager holds the only copy, and the next user of the slot sees any
write).  Outside its forward a paged parameter holds a placeholder of the
right shape, dtype and device whose elements are NaN (zeros for integer
types): it costs no memory and makes any use outside a hooked forward
visible.  ``state_dict()`` (so ``save_pretrained``) reads the true
weights through the pager instead, a layer at a time, into CPU tensors;
``.to(dtype)``, ``.half()`` or ``.to(other device)`` raise (they would
convert buffers but not the pager's weights); after :func:`remove` a
forward raises (see :mod:`wspager._weights`).  Autograd must not keep
weights beyond the forward: offloaded parameters have
``requires_grad=False``, unless the model is offloaded with
``train=True``: then autograd saves handles in place of paged weights, the
backward re-acquires each layer, and gradients leave through the pager's
write-back path (see :mod:`wspager._train`, :func:`grads`).
"""
from __future__ import annotations

import json
import os
import re
import warnings
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch

from . import Pager, Pack, convert as _convert
from ._optim import AdamW  # noqa: F401  (wspager.torch.AdamW: the native host AdamW)
from . import _loading
from ._weights import StateDictSource, forbid_forward, guard_conversions

__all__ = ["offload", "remove", "from_pretrained", "convert", "init_empty", "MismatchError",
           "TORCH_DTYPES", "grads", "zero_grad", "parameters", "named_parameters", "save", "AdamW",
           "step_in_backward"]

TORCH_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
    "F32": torch.float32, "F64": torch.float64, "C64": torch.complex64,
    "U16": getattr(torch, "uint16", None), "U32": getattr(torch, "uint32", None),
    "U64": getattr(torch, "uint64", None),
    "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
    "F8_E5M2": getattr(torch, "float8_e5m2", None),
}


class MismatchError(ValueError):
    """The pack and the model disagree; the message lists every difference."""


def _placeholder(shape, dtype, device) -> torch.Tensor:
    """Shape, dtype and device of a weight, one element of storage: NaN, so
    that a use outside a hooked forward cannot pass unnoticed."""
    fill = float("nan") if dtype.is_floating_point or dtype.is_complex else 0
    return torch.full((), fill, dtype=dtype, device=device).expand(shape)


class _Group:
    """One pack layer: its parameters and the views over its slot."""

    def __init__(self, index: int, name: str):
        self.index, self.name = index, name
        self.params: List[Tuple[torch.nn.Parameter, str, torch.dtype, Tuple[int, ...]]] = []
        self.depth = 0            # hooks holding it now (nested uses)
        self.layer = None         # the AcquiredLayer while held
        self.views: Dict[Tuple[int, str], torch.Tensor] = {}   # (slot address, name) -> view
        self.placeholders: List[torch.Tensor] = []


class Offload:
    """What :func:`offload` attached to a model (``model._wspager``)."""

    def __init__(self, model: torch.nn.Module, pager: Pager, device: torch.device):
        self.model, self.pager, self.device = model, pager, device
        self.groups: List[_Group] = []
        self.handles = []
        self.restore = []          # (module, attribute) set on the instance
        self.trainer = None        # wspager._train.Trainer with train=True
        self.experts = []          # (stacked-experts module, its experts' groups)
        self.hooked: List[torch.nn.Module] = []   # modules whose forward acquires

    def _stream(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.current_stream(self.device).cuda_stream
        return 0

    def _view(self, g: _Group, layer, name: str, dtype: torch.dtype, shape) -> torch.Tensor:
        return self._span(g, layer.address(name), layer.info(name).nbytes, dtype, shape)

    def _span(self, g: _Group, ptr: int, nbytes: int, dtype: torch.dtype, shape) -> torch.Tensor:
        """A tensor over `nbytes` of slot memory at `ptr` (no copy)."""
        key = (ptr, nbytes, dtype, tuple(shape))
        t = g.views.get(key)
        if t is not None:
            return t
        if nbytes == 0:
            t = torch.empty(shape, dtype=dtype, device=self.device)
        elif self.device.type == "cuda":
            raw = torch.as_tensor(_CudaBytes(ptr, nbytes, self.pager._view_owner()),
                                  device=self.device)
            t = raw.view(dtype).view(shape)
        else:
            buf = self.pager._host_buffer(ptr, nbytes)
            t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(shape)
        # Slots never move: the same layer in the same slot reuses its views.
        g.views[key] = t
        return t

    def acquire(self, g: _Group) -> None:
        g.depth += 1
        if g.depth > 1:
            return
        layer = self.pager.acquire(g.index, self._stream())
        g.layer = layer
        for p, name, dtype, shape in g.params:
            p.data = self._view(g, layer, name, dtype, shape)

    def release(self, g: _Group) -> None:
        g.depth -= 1
        if g.depth > 0:
            return
        for (p, _, _, _), ph in zip(g.params, g.placeholders):
            p.data = ph
        layer, g.layer = g.layer, None
        layer.release(self._stream())


class _CudaBytes:
    """`nbytes` bytes of device memory for torch.as_tensor (no copy); torch
    keeps this object, and so `owner` (the pager's memory), alive as long
    as the tensor."""

    def __init__(self, ptr: int, nbytes: int, owner: object):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None,
                                         "stream": None}


def _module_names(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    return dict(model.named_modules(remove_duplicate=False))


def _owners(model: torch.nn.Module) -> Dict[int, List[Tuple[str, torch.nn.Module, str]]]:
    """id(parameter) -> every (module path, module, attribute) holding it
    directly: tied weights appear under several modules."""
    out: Dict[int, List[Tuple[str, torch.nn.Module, str]]] = {}
    for mname, m in model.named_modules(remove_duplicate=False):
        for pname, p in m.named_parameters(recurse=False):
            out.setdefault(id(p), []).append((mname, m, pname))
    return out


def _inside(path: str, root: str) -> bool:
    return root == "" or path == root or path.startswith(root + ".")


def _resolve_device(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    if d.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be cuda[:N] or cpu, not {device}")
    return d


def offload(model: torch.nn.Module, pack: Union[str, os.PathLike], device=None, *,
            host_cache=None, gpu_slots: int = 3, resident: Sequence[str] = (),
            on_demand: Sequence[str] = (), train: bool = False,
            **pager_options) -> torch.nn.Module:
    """Page `model`'s weights from the pack through the pager.

    Parameters
    ----------
    model : torch.nn.Module
        Its parameters may be real or on the meta device; the pack provides
        every parameter it holds.  Parameter names must equal the pack's
        tensor names (a transformers model and its own checkpoint do).
    pack : path
        A pack made by ``wspack convert`` or :func:`wspager.convert`.
    device : "cuda", "cuda:N", "cpu" or None
        Where the weights are used; "cpu" runs the host backend; None: CUDA
        when torch has it, else the CPU.
    host_cache, gpu_slots, **pager_options
        As :class:`wspager.Pager` takes them, except that `host_cache`
        bounds all the pager's host memory here (``host_total=True``: the
        cache, read staging and decode buffers together) unless
        ``host_total=False`` is given.
    resident : names
        Pack layers (or module paths) loaded once into ordinary tensors on
        `device` instead of being paged, e.g. ``["model.embed_tokens"]``.
        Parameters the pack lacks are an error unless named here; then they
        keep the values they have.
    on_demand : names
        Pack layers, or module paths whose layers, are read only when their
        module runs, never ahead of need (task-specific heads).  Routed
        experts are always on demand: a module that never runs is never read.
    train : bool
        Paged parameters require gradients; the backward re-acquires each
        layer and hands its gradients to the pager, which adds them into
        fp32 host accumulators (:func:`grads`).  Layers an optimizer step
        changed are kept in memory up to ``updated_cache`` (a Pager option;
        default a quarter of `host_cache`), the rest in an unnamed overflow
        file (``overflow_dir``).  Routed experts are not trainable yet.

    Returns the model, hooked.  Every disagreement between pack and model
    (missing tensors, shapes, dtypes, layers without a module) is found
    before anything is bound and raised as one :class:`MismatchError`.
    """
    if getattr(model, "_wspager", None) is not None:
        raise ValueError("this model is already offloaded (wspager.torch.remove first)")
    for h in model.__dict__.pop("_wspager_removed", []):   # offloaded again after remove
        h.remove()
    dev = _resolve_device(_loading.default_device(device))
    with Pack(pack) as p:
        names = [L.name for L in p.layers]
    wanted = [n for n in names if re.search(r"\bexperts\.\d+$", n) or
              any(_inside(n, prefix) for prefix in on_demand)]
    unknown = [prefix for prefix in on_demand if not any(_inside(n, prefix) for n in names)]
    if unknown:
        raise MismatchError(f"{pack}: on_demand names no pack layer: {', '.join(unknown)}")
    pager_options.setdefault("host_total", True)   # host_cache: what a user budgets RAM for
    pager = Pager(pack, device="host" if dev.type == "cpu" else dev.index,
                  host_cache=host_cache, gpu_slots=gpu_slots, on_demand=wanted, **pager_options)
    try:
        plan = _plan(model, pager.pack, set(resident))
    except BaseException:
        pager.close()
        raise
    off = Offload(model, pager, dev)
    try:
        _bind(model, off, plan, dev)
        off.handles += StateDictSource(off, model).attach(model)
        guard_conversions(off, model)
        if train:
            if plan[3]:
                raise NotImplementedError("train=True: routed experts are not trainable yet")
            from ._train import Trainer
            off.trainer = Trainer(off, model)
    except BaseException:
        for h in off.handles:
            h.remove()
        pager.close()
        raise
    model._wspager = off
    return model


# Mixture of experts.  transformers 5 computes a layer's experts with one
# module holding stacked parameters (gate_up_proj [E, 2I, H], down_proj
# [E, H, I]) while checkpoints keep each expert's matrices apart; packs keep
# each routed expert as a layer of its own.  Such a module gets a forward
# that acquires only the experts its tokens are routed to, and computes what
# transformers' eager experts forward computes, with the gate and up halves
# as two products (the same values as the halves of one product).
_EXPERT_ROLES = {"w1.weight": "gate", "w3.weight": "up", "w2.weight": "down",
                 "gate_proj.weight": "gate", "up_proj.weight": "up", "down_proj.weight": "down"}
# Checkpoint names that transformers renames when it loads (Mixtral keeps
# its router as block_sparse_moe.gate in checkpoints, mlp.gate in the model).
_RENAMES = ((".block_sparse_moe.", ".mlp."),)


def _model_name(name: str, params) -> str:
    """The model's name for a pack tensor `name` (itself, or renamed)."""
    if name in params:
        return name
    for old, new in _RENAMES:
        if old in name and name.replace(old, new) in params:
            return name.replace(old, new)
    return name


_BLOCK = re.compile(r"^(.*?\b(?:layers|h|blocks)\.\d+)\.")


def _experts_modules(model: torch.nn.Module):
    """(path, module) of every module holding stacked expert parameters."""
    for path, m in model.named_modules():
        gu, dp = m._parameters.get("gate_up_proj"), m._parameters.get("down_proj")
        if gu is not None and dp is not None and gu.dim() == 3 and dp.dim() == 3:
            yield path, m


def _plan_experts(model, pack: Pack, problems: List[str]):
    """For each stacked-experts module: its pack layers, one per expert, with
    the names of their gate, up and down matrices."""
    plans, claimed = [], set()
    layers = {L.name: L for L in pack.layers}
    for path, m in _experts_modules(model):
        gu, dp = m.gate_up_proj, m.down_proj
        E, I2, H = gu.shape
        b = _BLOCK.match(path + ".")
        if not b:
            problems.append(f"experts module {path}: not inside a numbered block")
            continue
        pat = re.compile(r"^" + re.escape(b.group(1)) + r"\.(?:[\w.]+\.)?experts\.(\d+)$")
        found = {}
        for name in layers:
            mt = pat.match(name)
            if mt:
                found.setdefault(int(mt.group(1)), []).append(name)
        want_dtype = gu.dtype
        per = []
        for e in range(E):
            names = found.get(e, [])
            if len(names) != 1:
                problems.append(f"experts module {path}: expert {e} has {len(names)} pack layers "
                                f"({', '.join(names) or 'none'}); want one")
                continue
            L = layers[names[0]]
            roles = {}
            for t in L.tensors:
                role = _EXPERT_ROLES.get(t.short_name)
                want = {"gate": (I2 // 2, H), "up": (I2 // 2, H), "down": tuple(dp.shape[1:])}.get(role)
                if role is None or role in roles:
                    problems.append(f"pack tensor {t.name}: not a gate, up or down matrix of "
                                    f"expert {e} of {path}")
                elif tuple(t.shape) != want or TORCH_DTYPES.get(t.dtype) != want_dtype:
                    problems.append(f"tensor {t.name}: pack has {t.dtype} {list(t.shape)}, "
                                    f"{path} wants {str(want_dtype).replace('torch.', '')} "
                                    f"{list(want)}")
                else:
                    roles[role] = t
            if set(roles) != {"gate", "up", "down"}:
                problems.append(f"pack layer {L.name}: lacks "
                                + ", ".join(sorted({'gate', 'up', 'down'} - set(roles))))
                continue
            per.append((L, roles))
            claimed.add(L.name)
        plans.append((path, m, per))
    return plans, claimed


def _plan(model: torch.nn.Module, pack: Pack, resident: Set[str]):
    """Match pack layers and tensors with the model; every problem at once."""
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    modules = _module_names(model)
    owners = _owners(model)
    problems: List[str] = []
    paged, kept = [], []          # (layer, [(tensor, target)]) ; target: parameter or buffer name
    covered: Set[int] = set()     # ids of parameters the pack provides
    reported: Set[str] = set()    # names already in a problem
    known_res = set()
    experts, claimed = _plan_experts(model, pack, problems)
    for _, m, _ in experts:
        covered.update({id(m.gate_up_proj), id(m.down_proj)})
    for L in pack.layers:
        if L.name in claimed:
            continue
        is_res = L.name in resident
        if is_res:
            known_res.add(L.name)
        if not is_res and L.name not in modules:
            problems.append(f"pack layer {L.name} matches no module of the model")
        entries = []
        for t in L.tensors:
            pname = _model_name(t.name, params)
            target = params.get(pname)
            if target is None and t.name in buffers:
                target = buffers[t.name]
                pname, is_buffer = t.name, True
            else:
                is_buffer = False
            if target is None:
                problems.append(f"pack tensor {t.name} ({t.dtype} {list(t.shape)}) matches no "
                                "parameter or buffer of the model")
                continue
            want = TORCH_DTYPES.get(t.dtype)
            if want is None:
                problems.append(f"pack tensor {t.name}: dtype {t.dtype} has no torch dtype here")
                continue
            if tuple(target.shape) != tuple(t.shape) or target.dtype != want:
                problems.append(f"tensor {t.name}: pack has {t.dtype} {list(t.shape)}, model has "
                                f"{str(target.dtype).replace('torch.', '')} "
                                f"{list(target.shape)}")
                reported.add(pname)
                continue
            if not is_buffer:
                covered.add(id(target))
            entries.append((t, pname, is_buffer))
        (kept if (is_res or any(e[2] for e in entries)) else paged).append((L, entries))
    for name, p in params.items():
        if id(p) in covered or name in reported:
            continue
        mod = name.rsplit(".", 1)[0] if "." in name else ""
        if any(_inside(name, r) or _inside(mod, r) for r in resident):
            if p.device.type == "meta":
                problems.append(f"model parameter {name} is kept resident but has no value "
                                "(meta device) and is not in the pack")
            continue
        problems.append(f"model parameter {name} ({str(p.dtype).replace('torch.', '')} "
                        f"{list(p.shape)}) is not in the pack")
    for r in resident:
        if r not in known_res and r not in modules:
            problems.append(f"resident={r!r} names no pack layer and no module")
    if problems:
        raise MismatchError(f"{pack.path} does not fit the model ({len(problems)} problems):\n  "
                            + "\n  ".join(problems))
    return paged, kept, owners, experts


def _replace(owners, p: torch.nn.Parameter, data: torch.Tensor) -> torch.nn.Parameter:
    """A new Parameter over `data` in place of `p` in every module holding
    it (tied weights stay tied).  Assigning .data cannot take a meta
    parameter to another device; a new Parameter can."""
    new = torch.nn.Parameter(data, requires_grad=False)
    for _, m, attr in owners.get(id(p), []):
        m._parameters[attr] = new
    return new


def _bind(model: torch.nn.Module, off: Offload, plan, dev: torch.device) -> None:
    paged, kept, owners, experts = plan
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = _module_names(model)
    # Resident layers, and layers holding buffers: loaded once, copied.
    for L, entries in kept:
        with off.pager.acquire(L.index, off._stream()) as layer:
            g = _Group(L.index, L.name)
            for t, name, is_buffer in entries:
                view = off._view(g, layer, t.name, TORCH_DTYPES[t.dtype], t.shape).clone()
                if is_buffer:
                    owner, attr = name.rsplit(".", 1) if "." in name else ("", name)
                    modules[owner]._buffers[attr] = view
                else:
                    _replace(owners, params[name], view)
        if dev.type == "cuda":
            torch.cuda.current_stream(dev).synchronize()   # before the slot is reused
    # Everything not paged goes to the device as it is (buffers such as
    # rotary inv_freq, parameters kept resident).
    for path, m, per in experts:
        _bind_experts(off, m, per, owners, dev)
    params = dict(model.named_parameters(remove_duplicate=False))
    paged_ids = {id(params[name]) for _, entries in paged for _, name, _ in entries}
    for name, p in params.items():
        if id(p) not in paged_ids and p.device != dev:
            _replace(owners, p, p.data.to(dev))
    for mname, m in modules.items():
        for bname, b in list(m._buffers.items()):
            if b is not None and b.device != dev and b.device.type != "meta":
                m._buffers[bname] = b.to(dev)
    # Paged layers: a group each, hooked on its module and on every module
    # outside it that holds one of its parameters (tied weights).
    hooks: Dict[int, Tuple[torch.nn.Module, List[_Group]]] = {}
    for L, entries in paged:
        g = _Group(L.index, L.name)
        users = {L.name}
        for t, name, _ in entries:
            old = params[name]
            for mpath, _, _ in owners.get(id(old), []):
                if not _inside(mpath, L.name):
                    users.add(mpath)
            dtype = TORCH_DTYPES[t.dtype]
            ph = _placeholder(tuple(t.shape), dtype, dev)
            p = _replace(owners, old, ph)
            g.params.append((p, t.name, dtype, tuple(t.shape)))
            g.placeholders.append(ph)
        off.groups.append(g)
        for mpath in sorted(users):
            m = modules[mpath]
            hooks.setdefault(id(m), (m, []))[1].append(g)
    off.hooked = [m for m, _ in hooks.values()] + [m for m, _ in off.experts]
    for m, groups in hooks.values():
        def pre(_mod, _args, _kwargs=None, groups=groups):
            for g in groups:
                off.acquire(g)

        def post(_mod, _args, _out, groups=groups):
            for g in reversed(groups):
                off.release(g)
        off.handles.append(m.register_forward_pre_hook(pre))
        off.handles.append(m.register_forward_hook(post, always_call=True))


def _bind_experts(off: "Offload", m: torch.nn.Module, per, owners, dev: torch.device) -> None:
    """Stacked expert parameters become placeholders; the module's forward
    acquires each routed expert's layer around its products."""
    E = m.gate_up_proj.shape[0]
    impl = getattr(getattr(m, "config", None), "_experts_implementation", None)
    if impl not in (None, "eager"):
        warnings.warn(f"{type(m).__name__}: the model computes experts with {impl!r}; paged "
                      "experts compute as the 'eager' implementation does (logits equal a "
                      "resident model with config._experts_implementation = 'eager')")
    for attr in ("gate_up_proj", "down_proj"):
        p = m._parameters[attr]
        _replace(owners, p, _placeholder(tuple(p.shape), p.dtype, dev))
    groups = []
    for L, roles in per:
        g = _Group(L.index, L.name)
        g.roles = {r: (t.name, TORCH_DTYPES[t.dtype], tuple(t.shape)) for r, t in roles.items()}
        groups.append(g)
        off.groups.append(g)
    off.experts.append((m, groups))
    F = torch.nn.functional

    def routed_forward(hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = F.one_hot(top_k_index, num_classes=E + 1).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        chosen = [e for e in hit[:, 0].tolist() if e < E]
        # The router has chosen: the pager reads exactly these next, and
        # learns nothing from their (data-dependent) order.
        off.pager.hint_next([groups[e].index for e in chosen])
        for e in chosen:
            top_k_pos, token_idx = torch.where(mask[e])
            x = hidden_states[token_idx]
            g = groups[e]
            layer = off.pager.acquire(g.index, off._stream(), routed=True)
            try:
                (gn, dt, gs), (un, _, us) = g.roles["gate"], g.roles["up"]
                ga, gb = layer.address(gn), layer.info(gn).nbytes
                if layer.address(un) == ga + gb:
                    # gate and up adjacent (wspager.torch.convert lays them
                    # so): one [2I, H] matrix, as transformers stacks them
                    gate_up = off._span(g, ga, 2 * gb, dt, (gs[0] + us[0], gs[1]))
                else:
                    gate_up = torch.cat([off._view(g, layer, gn, dt, gs),
                                         off._view(g, layer, un, dt, us)])
                gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
                h = m.act_fn(gate) * up
                dn, ddt, ds = g.roles["down"]
                h = F.linear(h, off._view(g, layer, dn, ddt, ds))
                h = h * top_k_weights[token_idx, top_k_pos, None]
                final.index_add_(0, token_idx, h.to(final.dtype))
            finally:
                layer.release(off._stream())
        return final
    m.forward = routed_forward
    off.restore.append((m, "forward"))


def _unit_of(path: str, units: Sequence[str]) -> Optional[str]:
    for u in units:
        if _inside(path, u):
            return u
    return None


def convert(model: torch.nn.Module, checkpoint, out, *, force: bool = False,
            progress=None, log=None) -> Pack:
    """Convert `checkpoint` into the pack `out`, grouped by the modules the
    hooks of :func:`offload` sit on: each module whose class the model names
    in ``_no_split_modules`` (transformers' decoder layers and the like), each
    routed expert of a mixture-of-experts block, and for every other
    parameter the module that holds it; layers in the model's module order.
    The grouping goes to the C converter as an explicit tensor->layer map."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    units = [p for p, m in model.named_modules() if type(m).__name__ in names]
    units.sort(key=len, reverse=True)          # the innermost unit wins
    order = {p: i for i, (p, _) in enumerate(model.named_modules())}
    pairs = []
    for k in _checkpoint_keys(os.fspath(checkpoint)):
        owner = k.rsplit(".", 1)[0] if "." in k else k
        expert = re.match(r"^(.*\b(?:layers|h|blocks)\.\d+\..*?experts\.\d+)\.", k)
        pairs.append((k, expert.group(1) if expert else (_unit_of(owner, units) or owner)))
    # an expert's gate and up matrices adjacent, in that order: the experts
    # forward then uses them as one stacked matrix, as transformers does
    role_order = {"gate": 0, "up": 1, "down": 2}

    def role(kl):
        short = kl[0][len(kl[1]) + 1:] if kl[0].startswith(kl[1] + ".") else ""
        return role_order.get(_EXPERT_ROLES.get(short), 3)

    def rank(layer):   # the pack's layer order: the model's module order,
        p = layer      # a block's routed experts after it, in expert order
        while p and p not in order:
            p = p.rsplit(".", 1)[0] if "." in p else ""
        e = re.search(r"\bexperts\.(\d+)$", layer)
        return order.get(p, len(order)), int(e.group(1)) + 1 if e else 0
    pairs.sort(key=lambda kl: (rank(kl[1]), role(kl)))
    return _convert(checkpoint, out, groups=pairs, force=force, progress=progress, log=log)


def _checkpoint_keys(checkpoint: str) -> List[str]:
    """The tensor names of a checkpoint directory or .safetensors file."""
    import struct
    files = [checkpoint] if os.path.isfile(checkpoint) else sorted(
        os.path.join(checkpoint, f) for f in os.listdir(checkpoint) if f.endswith(".safetensors"))
    keys: List[str] = []
    for f in files:
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            if n > 100 << 20:
                raise ValueError(f"{f}: header of {n} bytes above 100 MB: not a safetensors file")
            keys += [k for k in json.loads(fh.read(n)) if k != "__metadata__"]
    return keys


def _trainer(model: torch.nn.Module):
    off = getattr(model, "_wspager", None)
    if off is None or off.trainer is None:
        raise ValueError("this model is not offloaded with train=True")
    return off.trainer


def grads(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """The gradients the backward passes since the last :func:`zero_grad`
    accumulated, by parameter name: fp32 tensors in host memory, views of
    the pager's accumulators (waits for copies still in flight)."""
    return _trainer(model).grads()


def zero_grad(model: torch.nn.Module) -> None:
    """Start the gradient accumulators of every paged layer over."""
    _trainer(model).zero_grad()


def named_parameters(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Parameter]]:
    """The paged parameters' fp32 host masters, by name, in the model's
    ``named_parameters()`` order, for an optimizer: their ``.grad`` are the
    pager's accumulators, real as soon as a backward is over (clip, unscale
    or log them there; micro-batches accumulate into them), and after each
    step of an optimizer over them the stepped values, in each parameter's
    dtype, become the weights the next forward uses."""
    return _trainer(model).named_parameters()


def parameters(model: torch.nn.Module) -> List[torch.nn.Parameter]:
    """:func:`named_parameters` without the names."""
    return [p for _, p in named_parameters(model)]


def step_in_backward(model: torch.nn.Module, optimizer=torch.optim.AdamW, **kwargs):
    """Step the model's paged parameters on its device, one layer at a time,
    inside the backward: as soon as a layer's gradients are complete,
    ``optimizer(params, **kwargs)`` (any torch optimizer; one per layer)
    steps its fp32 masters there, and the new weights, in each parameter's
    dtype, become what the next forward uses.  Masters and optimizer state
    are kept by the pager between steps, one buffer a layer
    (``wsp_state_acquire``): page-locked host memory up to the pager's
    ``state_cache`` (a quarter of `host_cache` unless given), the rest in
    an unnamed overflow file, so that weights and optimizer state larger
    than host memory train within a bound.  A layer's buffer crosses the
    link while its backward runs; gradients never leave the device.

    Each backward is one optimizer step (no accumulation across backward
    passes).  Returns an object whose ``step()`` waits for the last layers'
    copies (the next forward also does) and whose ``zero_grad()`` does
    nothing, so a usual training loop keeps its shape::

        opt = wt.step_in_backward(model, torch.optim.AdamW, lr=1e-4)
        model(ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()

    Not with :func:`parameters` (host masters) on the same model."""
    if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
        raise TypeError(f"step_in_backward: optimizer must be a torch.optim.Optimizer class, "
                        f"not {optimizer!r}")
    return _trainer(model).step_in_backward(optimizer, kwargs)


def save(model: torch.nn.Module, out, *, force: bool = False, progress=None) -> None:
    """Write the model's current weights (stepped or not) as a new pack at
    `out`, atomically; ``wspack unpack`` of it gives safetensors."""
    _trainer(model).save(out, force=force, progress=progress)


def remove(model: torch.nn.Module) -> None:
    """Take the hooks off and close the pager.  Paged parameters keep their
    placeholders: the model has no weights of its own afterwards, and a
    forward of it raises (save its ``state_dict()`` first to keep them)."""
    off = getattr(model, "_wspager", None)
    if off is None:
        return
    for h in off.handles:
        h.remove()
    if off.trainer is not None:
        from ._train import _TRAINERS
        _TRAINERS.discard(off.trainer)
        off.trainer.wait()
    for m, attr in off.restore:
        m.__dict__.pop(attr, None)
    for g in off.groups:
        g.views.clear()
    off.pager.close()
    model._wspager = None
    model._wspager_removed = forbid_forward(off.hooked)


_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
                   "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                   "kaiming_normal_", "orthogonal_", "sparse_")


@contextmanager
def init_empty():
    """Build modules with their parameters on the meta device (no memory)
    and their buffers as usual (so computed buffers such as rotary
    ``inv_freq`` are real).  Initialisers do nothing meanwhile: a layer's
    parameter is allocated before it can be moved to meta, and an untouched
    allocation costs no resident memory, while a random init of an
    embedding would cost its whole size for a moment."""
    orig = torch.nn.Module.register_parameter
    inits = {n: getattr(torch.nn.init, n) for n in _INIT_FUNCTIONS if hasattr(torch.nn.init, n)}

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        return orig(self, name, param)

    def skip(tensor, *args, **kwargs):
        return tensor
    torch.nn.Module.register_parameter = register
    for n in inits:
        setattr(torch.nn.init, n, skip)
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = orig
        for n, f in inits.items():
            setattr(torch.nn.init, n, f)


def _is_pack(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "manifest.wspm"))


def _pack_for(checkpoint: str, log, model=None) -> str:
    """The pack cached beside a safetensors checkpoint directory
    (``DIR.wsp``), converted again when any input is newer than it."""
    out = checkpoint.rstrip("/") + ".wsp"
    inputs = [os.path.join(checkpoint, f) for f in os.listdir(checkpoint)
              if f.endswith(".safetensors") or f == "model.safetensors.index.json"]
    if not inputs:
        raise FileNotFoundError(f"{checkpoint}: no .safetensors files (is it a checkpoint "
                                "directory?)")
    manifest = os.path.join(out, "manifest.wspm")
    if os.path.exists(manifest):
        newest = max(os.path.getmtime(p) for p in inputs)
        if os.path.getmtime(manifest) >= newest:
            return out
    progress, done = _loading.progress_bar(checkpoint, out)
    try:
        if model is not None:   # grouped by the modules the hooks sit on
            p = convert(model, checkpoint, out, force=os.path.exists(out), log=log,
                        progress=progress)
        else:
            p = _convert(checkpoint, out, force=os.path.exists(out), log=log, progress=progress)
    finally:
        done()
    with p:
        ratio = p.summary["raw_bytes"] / max(p.summary["stored_bytes"], 1)
    _loading.notify(log, f"wspager: packed {checkpoint} into {out} ({ratio:.2f}x smaller); "
                         "later loads reuse it while it is newer than the checkpoint")
    return out


def from_pretrained(path: Union[str, bytes, os.PathLike], device=None, *, config=None,
                    host_cache=None, gpu_slots: int = 3, resident: Sequence[str] = (),
                    on_demand: Sequence[str] = (), model_class=None, train: bool = False,
                    log=None, **pager_options) -> torch.nn.Module:
    """A transformers model whose weights are paged, never loaded whole.

    Parameters
    ----------
    path : path or Hub id
        A checkpoint directory (``config.json`` and safetensors files; the
        pack is made beside it as ``DIR.wsp``, with a progress bar, and
        reused while up to date), or a pack (then give `config`: a
        directory, file or PretrainedConfig).  A path that does not exist
        is an error naming it, unless it can be a Hugging Face Hub id: then
        the Hub's snapshot is used.
    device : "cuda", "cuda:N", "cpu" or None
        None: CUDA when torch has it, else the host backend (logged to the
        "wspager" logger and to `log`).
    model_class : optional
        A transformers Auto class (default ``AutoModelForCausalLM``) or a
        model class (``LlamaForCausalLM``).
    train : bool
        As :func:`offload`: paged parameters train through the pager.
    log : callable(str), optional
        Receives notes: the device chosen, where the pack went, the
        converter's notes on the inputs.
    Other parameters as :func:`offload`.  The generation config is
    ``generation_config.json`` of the checkpoint (or of `config`'s
    directory), loaded as transformers loads it.
    """
    import transformers

    dev = _loading.default_device(device, log)
    path = _loading.local_checkpoint(path, log)
    is_pack = _is_pack(path)
    if is_pack and config is None:
        raise ValueError(f"{path} is a pack: give config= (the checkpoint's config.json or its "
                         "directory)")
    if config is None:
        config = path
    config_dir = None
    if not isinstance(config, transformers.PretrainedConfig):
        config = os.fspath(config)
        config_dir = config if os.path.isdir(config) else os.path.dirname(config)
        config = transformers.AutoConfig.from_pretrained(config)
    cls = model_class or transformers.AutoModelForCausalLM
    with init_empty():
        model = _loading.build_model(cls, config)
    _loading.load_generation_config(model, path if not is_pack else config_dir)
    pack = path if is_pack else _pack_for(path, log, model)
    # The pack decides the dtypes: meta parameters take them at no cost.
    with Pack(pack) as p:
        dtypes = {t.name: TORCH_DTYPES.get(t.dtype) for t in p.tensors()}
    for name, prm in model.named_parameters():
        want = dtypes.get(name)
        if want is not None and prm.dtype != want and prm.device.type == "meta":
            prm.data = prm.data.to(want)
    model.eval()
    return offload(model, pack, dev, host_cache=host_cache, gpu_slots=gpu_slots,
                   resident=resident, on_demand=on_demand, train=train, **pager_options)
