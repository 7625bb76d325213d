"""Which pack tensor becomes which part of the model, decided before
anything is bound, with every disagreement reported at once.

Pack tensors keep their checkpoint names; :class:`wspager._hf.Names`
gives each one the model name transformers' loader would give it.  A
tensor then lands in one of four places:

* a **paged** parameter: bound to the pager's slot memory around each
  forward of the module holding it (cast on the device when the model
  keeps it in another dtype, as transformers casts it at load);
* a **kept** tensor: a buffer (persistent buffers come from the pack,
  cast to the buffer's dtype) or a parameter named in ``resident``, read
  once at bind time;
* a **routed expert**: one expert's slice of a stacked parameter that a
  transformers converter builds from per-expert tensors (see
  :mod:`wspager._experts`); read only when the router picks the expert;
* a **converted** parameter: made by any other converter, read once and
  kept on the device.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

import torch

from . import Pack


class MismatchError(ValueError):
    """The pack and the model disagree; the message lists every difference."""


TORCH_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
    "F32": torch.float32, "F64": torch.float64, "C64": torch.complex64,
    "U16": getattr(torch, "uint16", None), "U32": getattr(torch, "uint32", None),
    "U64": getattr(torch, "uint64", None),
    "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
    "F8_E5M2": getattr(torch, "float8_e5m2", None),
}


def placeholder(shape, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Shape, dtype and device of a weight, one element of storage: NaN
    (zero for integer types), so that a use outside a hooked forward cannot
    pass unnoticed."""
    return _scalar(dtype, device).expand(shape)


def _scalar(dtype: torch.dtype, device) -> torch.Tensor:
    fill = float("nan") if dtype.is_floating_point or dtype.is_complex else 0
    return torch.full((), fill, dtype=dtype, device=device)


class Placeholders:
    """Placeholders (as :func:`placeholder`) that share one scalar per
    dtype and device.  Each scalar is a fill, which on CUDA is a kernel
    launch; while the host tier is page-locked in the background
    (cudaHostRegister holds the driver) every launch waits, and one per
    parameter took 0.8-1.2 s of a 6 GB Llama's cold load, against 0.01 s
    shared (bench/torch_ttft.py --timeline)."""

    def __init__(self):
        self.scalars: Dict[Tuple[torch.dtype, str], torch.Tensor] = {}

    def __call__(self, shape, dtype: torch.dtype, device=None) -> torch.Tensor:
        key = (dtype, str(device))
        if key not in self.scalars:
            self.scalars[key] = _scalar(dtype, device)
        return self.scalars[key].expand(shape)


def _dt(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def inside(path: str, root: str) -> bool:
    return root == "" or path == root or path.startswith(root + ".")


@dataclass
class Entry:
    """One pack tensor and where it goes."""
    tensor: object            # wspager TensorInfo
    layer: object             # wspager LayerInfo holding it
    name: str                 # model parameter or buffer name
    dtype: torch.dtype        # the model's dtype for it


@dataclass
class Experts:
    """A module holding stacked expert parameters that converters build
    from per-expert pack tensors."""
    path: str
    module: torch.nn.Module
    count: int
    # attribute -> (model name, converter, source pattern -> per-expert entries)
    targets: Dict[str, Tuple[str, object, Dict[str, List[Entry]]]] = field(default_factory=dict)


@dataclass
class Plan:
    paged: Dict[int, List[Entry]] = field(default_factory=dict)    # layer index -> params
    kept: Dict[int, List[Entry]] = field(default_factory=dict)     # layer index -> tensors
    experts: List[Experts] = field(default_factory=list)
    # model name -> (converter, source pattern -> entries), made once
    converted: Dict[str, Tuple[object, Dict[str, List[Entry]]]] = field(default_factory=dict)
    layers: Dict[int, object] = field(default_factory=dict)        # index -> LayerInfo
    expert_only: Set[int] = field(default_factory=set)             # layers of routed experts alone

    def on_demand(self) -> List[str]:
        return [self.layers[i].name for i in sorted(self.expert_only)]


def plan(model: torch.nn.Module, pack: Pack, names, resident: Set[str], train: bool,
         values: bool = True) -> Plan:
    """Match every pack tensor with the model; every problem at once.
    values=False: the model is a meta-device probe of the one to come, so
    parameters and buffers without values are not problems."""
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    modules = dict(model.named_modules(remove_duplicate=False))
    problems: List[str] = []
    out = Plan()
    covered: Set[int] = set()          # ids of parameters the pack provides
    reported: Set[str] = set()         # model names already in a problem
    feeding: Dict[str, Dict[str, List[Entry]]] = {}   # converter target -> pattern -> entries
    patterns: Dict[str, str] = {}      # converter target -> one of its source patterns
    for L in pack.layers:
        out.layers[L.index] = L
        for t in L.tensors:
            want = TORCH_DTYPES.get(t.dtype)
            if want is None:
                problems.append(f"pack tensor {t.name}: dtype {t.dtype} has no torch dtype here")
                continue
            name, pattern = names(t.name)
            if pattern is not None and name in params:
                if train and params[name].dtype != want:
                    problems.append(f"tensor {t.name} (model name {name}): pack has {t.dtype}, "
                                    f"model has {_dt(params[name].dtype)}; train=True needs "
                                    "the pack's dtype")
                    reported.add(name)
                    continue
                feeding.setdefault(name, {}).setdefault(pattern, []).append(
                    Entry(t, L, name, params[name].dtype))
                patterns[name] = pattern
                continue
            target = params.get(name)
            if target is None:
                target = buffers.get(name)
            shown = t.name if name == t.name else f"{t.name} (model name {name})"
            if target is None:
                problems.append(f"pack tensor {shown} ({t.dtype} {list(t.shape)}) matches no "
                                "parameter or buffer of the model")
                continue
            if tuple(target.shape) != tuple(t.shape):
                problems.append(f"tensor {shown}: pack has {t.dtype} {list(t.shape)}, model has "
                                f"{_dt(target.dtype)} {list(target.shape)}")
                reported.add(name)
                continue
            e = Entry(t, L, name, target.dtype)
            is_param = name in params
            if is_param:
                covered.add(id(target))
            if not is_param or L.name in resident or _resident(name, resident):
                out.kept.setdefault(L.index, []).append(e)
                continue
            if train and target.dtype != want:
                problems.append(f"tensor {shown}: pack has {t.dtype}, model has "
                                f"{_dt(target.dtype)}; train=True needs the pack's dtype")
                reported.add(name)
                continue
            out.paged.setdefault(L.index, []).append(e)
    for name, sources in feeding.items():
        if name in reported:
            continue
        for pattern in sources:       # the loader's collection order
            order = names.order([e.tensor.name for e in sources[pattern]])
            by_name = {e.tensor.name: e for e in sources[pattern]}
            sources[pattern] = [by_name[n] for n in order]
        covered.add(id(params[name]))
        # a converter that splits makes more parameters than the one it
        # is named by: the pack provides those too
        try:
            made = names.outputs(name, {pt: [(tuple(e.tensor.shape), TORCH_DTYPES[e.tensor.dtype])
                                             for e in es] for pt, es in sources.items()})
        except Exception:          # the conversion itself reports it at bind
            made = []
        covered.update(id(params[m]) for m in made if m in params)
        _place_converted(model, modules, names, name, patterns[name], sources, out, problems)
    expert_layers = {e.layer.index for x in out.experts for _, _, s in x.targets.values()
                     for es in s.values() for e in es}
    out.expert_only = {i for i in expert_layers if i not in out.paged and i not in out.kept}
    for name, p in params.items():
        if id(p) in covered or name in reported:
            continue
        if _resident(name, resident):
            if values and p.device.type == "meta":
                problems.append(f"model parameter {name} is kept resident but has no value "
                                "(meta device) and is not in the pack")
            continue
        problems.append(f"model parameter {name} ({_dt(p.dtype)} {list(p.shape)}) is not in "
                        "the pack")
    given = {e.name for es in out.kept.values() for e in es}
    empty = [n for n, b in buffers.items() if values and b is not None
             and b.device.type == "meta" and n not in given]
    if empty:
        problems.append("buffers on the meta device have no value and are not in the pack: "
                        + ", ".join(empty) + " (build the model with wspager.torch.init_empty(), "
                        "which keeps buffers real, or load it with wspager.torch.from_pretrained)")
    known = {L.name for L in pack.layers}
    for r in resident:     # a parameter's own name too (from_pretrained's made weights)
        if r not in known and r not in modules and r not in params and r not in buffers:
            problems.append(f"resident={r!r} names no pack layer, module or parameter")
    if problems:
        raise MismatchError(f"{pack.path} does not fit the model ({len(problems)} problems):\n  "
                            + "\n  ".join(problems))
    return out


# A paged layer at most 1/SMALL_SHARE of the largest layer's raw bytes
# (a final norm: kilobytes beside hundreds of megabytes) is kept on the
# device instead: as a paged layer it takes a whole slot, a fill and a
# visit at every use, and at a training step's turn from forward to
# backward the slot it holds is one layer fewer filled ahead.  All such
# layers together take at most 1/SMALL_TOTAL of the largest layer.
SMALL_SHARE = 256
SMALL_TOTAL = 16


def keep_small(plan: Plan, exclude: Set[str]) -> List[str]:
    """Move the paged layers that are small (above), and not named in
    `exclude` (read only on demand), to the kept tensors, smallest first;
    their names."""
    if not plan.layers:
        return []
    largest = max(L.raw_bytes for L in plan.layers.values())
    small = sorted((plan.layers[i].raw_bytes, i) for i in plan.paged
                   if plan.layers[i].name not in exclude
                   and plan.layers[i].raw_bytes * SMALL_SHARE <= largest)
    moved, total = [], 0
    for size, i in small:
        if (total + size) * SMALL_TOTAL > largest:
            break
        total += size
        plan.kept.setdefault(i, []).extend(plan.paged.pop(i))
        moved.append(plan.layers[i].name)
    return moved


def _resident(name: str, resident: Set[str]) -> bool:
    mod = name.rsplit(".", 1)[0] if "." in name else ""
    return any(inside(name, r) or inside(mod, r) for r in resident)


def _place_converted(model, modules, names, name: str, pattern: str,
                     sources: Dict[str, List[Entry]], out: Plan, problems: List[str]) -> None:
    """A parameter built by a converter: routed experts when its module
    holds one stacked slice per expert, else converted once."""
    path, _, attr = name.rpartition(".")
    m = modules.get(path)
    count = getattr(m, "num_experts", None)
    per_expert = isinstance(count, int) and count > 0 and \
        all(len(es) == count for es in sources.values()) and \
        getattr(m, attr).dim() >= 1 and getattr(m, attr).shape[0] == count
    converter = names.converter(pattern)
    if not per_expert:
        out.converted[name] = (converter, sources)
        return
    x = next((x for x in out.experts if x.module is m), None)
    if x is None:
        x = Experts(path, m, count)
        out.experts.append(x)
    x.targets[attr] = (name, converter, sources)


def home(layer: str, names: List[str], modules) -> str:
    """The module whose forward holds pack layer `layer` with parameters
    `names`: the layer's own module when it holds them all (the grouping
    of :func:`wspager.torch.convert`), else the deepest module holding them
    all whose forward runs (not a ModuleList or ModuleDict)."""
    if layer in modules and all(inside(n, layer) for n in names):
        return layer
    parts = [n.split(".")[:-1] for n in names]
    common = parts[0]
    for p in parts[1:]:
        k = 0
        while k < min(len(common), len(p)) and common[k] == p[k]:
            k += 1
        common = common[:k]
    path = ".".join(common)
    while path and (path not in modules or
                    isinstance(modules[path], (torch.nn.ModuleList, torch.nn.ModuleDict))):
        path = path.rsplit(".", 1)[0] if "." in path else ""
    return path
