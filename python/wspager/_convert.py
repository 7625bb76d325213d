"""Converting a checkpoint for a model: grouped by the modules the hooks
sit on (:func:`convert`), and the pack kept beside a checkpoint directory
for :func:`wspager.torch.from_pretrained` (:func:`pack_for`)."""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import Pack, convert as _convert
from . import _hf, _loading
from ._bind import module_names
from ._plan import inside


def _unit_of(path: str, units: Sequence[str]) -> Optional[str]:
    for u in units:
        if inside(path, u):
            return u
    return None


def convert(model: torch.nn.Module, checkpoint, out, *, force: bool = False,
            progress=None, log=None) -> Pack:
    """Convert `checkpoint` into the pack `out`, grouped by the modules the
    hooks of :func:`offload` sit on: each module whose class the model names
    in ``_no_split_modules`` (transformers' decoder layers and the like), each
    routed expert of a mixture-of-experts block, and for every other
    parameter the module that holds it; layers in the model's module order.
    Tensors keep their checkpoint names; where they belong in the model is
    asked of transformers (:class:`wspager._hf.Names`).  The grouping goes
    to the C converter as an explicit tensor->layer map."""
    names = _hf.Names(model)
    split = set(getattr(model, "_no_split_modules", None) or [])
    modules = module_names(model)
    units = [p for p, m in modules.items() if type(m).__name__ in split]
    units.sort(key=len, reverse=True)          # the innermost unit wins
    order = {p: i for i, (p, _) in enumerate(model.named_modules())}
    keys = checkpoint_keys(os.fspath(checkpoint))
    mapped = {k: names(k) for k in keys}
    # the keys feeding each converter target, in the loader's order: the
    # n-th is expert n's where the target's module holds one per expert
    feeding: Dict[Tuple[str, str], List[str]] = {}
    for k, (name, pattern) in mapped.items():
        if pattern is not None:
            feeding.setdefault((name, pattern), []).append(k)
    expert_of = {}
    for (name, _), ks in feeding.items():
        path = name.rsplit(".", 1)[0] if "." in name else ""
        count = getattr(modules.get(path), "num_experts", None)
        if isinstance(count, int) and len(ks) == count:
            expert_of.update({k: (path, e) for e, k in enumerate(names.order(ks))})
    pairs = []
    for k in keys:
        if k in expert_of:
            path, e = expert_of[k]
            pairs.append((k, f"{path}.{e}"))
            continue
        name = mapped[k][0]
        owner = name.rsplit(".", 1)[0] if "." in name else name
        pairs.append((k, _unit_of(owner, units) or owner))
    experts_at = {f"{p}.{e}": (p, e) for p, e in expert_of.values()}

    def rank(layer):   # the pack's layer order: the model's module order,
        if layer in experts_at:        # a block's routed experts after it
            p, e = experts_at[layer]
            return order.get(p, len(order)), e + 1
        p = layer
        while p and p not in order:
            p = p.rsplit(".", 1)[0] if "." in p else ""
        return order.get(p, len(order)), 0
    pairs.sort(key=lambda kl: rank(kl[1]))
    return _convert(checkpoint, out, groups=pairs, force=force, progress=progress, log=log)


def checkpoint_keys(checkpoint: str) -> List[str]:
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


def is_pack(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "manifest.wspm"))


def pack_for(checkpoint: str, log, model=None) -> str:
    """The pack cached beside a checkpoint directory (``DIR.wsp``),
    converted again when any input is newer than it.  A directory with
    only PyTorch .bin shards is read as transformers reads it, through a
    temporary safetensors copy removed afterwards."""
    out = checkpoint.rstrip("/") + ".wsp"
    inputs = [os.path.join(checkpoint, f) for f in os.listdir(checkpoint)
              if f.endswith(".safetensors") or f == "model.safetensors.index.json"]
    bins = [] if inputs else _loading.bin_files(checkpoint)
    if not inputs and not bins:
        raise FileNotFoundError(f"{checkpoint}: no .safetensors and no pytorch_model.bin files "
                                "(is it a checkpoint directory?)")
    manifest = os.path.join(out, "manifest.wspm")
    if os.path.exists(manifest):
        newest = max(os.path.getmtime(p) for p in inputs + bins)
        if os.path.getmtime(manifest) >= newest:
            return out
    source = checkpoint
    if bins:
        import tempfile
        source = tempfile.mkdtemp(prefix=os.path.basename(out) + ".bin-",
                                  dir=os.path.dirname(os.path.abspath(out)))
    try:
        if bins:
            _loading.safetensors_from_bin(bins, source, log)
        progress, done = _loading.progress_bar(checkpoint, out)
        try:
            if model is not None:   # grouped by the modules the hooks sit on
                p = convert(model, source, out, force=os.path.exists(out), log=log,
                            progress=progress)
            else:
                p = _convert(source, out, force=os.path.exists(out), log=log, progress=progress)
        finally:
            done()
    finally:
        if bins:
            import shutil
            shutil.rmtree(source, ignore_errors=True)
    with p:
        ratio = p.summary["raw_bytes"] / max(p.summary["stored_bytes"], 1)
    _loading.notify(log, f"wspager: packed {checkpoint} into {out} ({ratio:.2f}x smaller); "
                         "later loads reuse it while it is newer than the checkpoint")
    return out
