"""What transformers decides when it loads a checkpoint, asked of
transformers rather than copied:

* the model name of each checkpoint tensor: its loader renames keys
  (``embed_out`` -> ``lm_head``, ``block_sparse_moe`` -> ``mlp``, ViT's
  ``attention.attention.query`` -> ``q_proj``...) and feeds some through
  converters (each expert's ``w1``/``w3`` stacked into ``gate_up_proj``);
  :class:`Names` applies the same mapping the loader applies to the model
  class at hand, so a rename transformers adds later needs no change here;
* the stacked parameter a converter makes from per-expert tensors
  (:meth:`Names.convert`), run by transformers' own operations;
* the model itself: :func:`skeleton` lets transformers' ``from_pretrained``
  build it and load a zero-cost placeholder for every parameter the pack
  provides, so that every buffer (rotary tables, masks, position ids) is
  made exactly as that call makes it (dtype, device, order).

A model that is not a transformers model keeps its names unchanged."""
from __future__ import annotations

import copy
from typing import Dict, List, Optional, Tuple

import torch


def _is_transformers_model(model) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return isinstance(model, PreTrainedModel)


class Names:
    """Checkpoint tensor name -> (model parameter or buffer name, source
    pattern of the converter it feeds or None), as transformers' loader
    maps it for `model`."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.keys = dict.fromkeys(model.state_dict(keep_vars=True))
        self.renamings: List = []
        self.converters: List = []
        self.prefix: Optional[str] = None
        if not _is_transformers_model(model):
            return
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming
        mapping = get_model_conversion_mapping(model)
        self.renamings = [t for t in mapping if isinstance(t, WeightRenaming)]
        self.converters = [t for t in mapping if isinstance(t, WeightConverter)]
        self.prefix = model.base_model_prefix
        self.by_pattern = {p: c for c in self.converters for p in c.source_patterns}

    def __call__(self, key: str) -> Tuple[str, Optional[str]]:
        if self.prefix is None:
            return key, None
        from transformers.core_model_loading import rename_source_key
        name, pattern = rename_source_key(key, self.renamings, self.converters, self.prefix,
                                          self.keys)
        if name not in self.keys and key in self.keys:
            # as the loader does: a key the model already has keeps its name
            name, pattern = rename_source_key(key, [], [], self.prefix, self.keys)
        return name, pattern

    def order(self, keys: List[str]) -> List[str]:
        """`keys` in the order the loader collects them (its natural sort:
        expert 10 after expert 9), which is the order converters stack."""
        from transformers.core_model_loading import dot_natural_key
        return sorted(keys, key=dot_natural_key)

    def converter(self, pattern: str):
        """A private copy of the converter that `pattern` feeds (the loader
        also gives each target its own)."""
        return copy.deepcopy(self.by_pattern[pattern])

    def convert(self, converter, target: str, tensors: Dict[str, List[torch.Tensor]]
                ) -> Dict[str, torch.Tensor]:
        """Run `converter` over `tensors` (source pattern -> tensors in
        collection order) as the loader runs it for `target`; returns the
        model names it produced and their tensors."""
        for pattern, ts in tensors.items():
            for i, t in enumerate(ts):
                converter.add_tensor(target, f"{target}#{pattern}#{i}", pattern, t)
        out = converter.convert(target, model=self.model, config=self.model.config)
        return {k: (v[0] if isinstance(v, list) else v) for k, v in out.items()}

    def outputs(self, target: str, sources: Dict[str, List[Tuple[Tuple[int, ...], torch.dtype]]]
                ) -> List[str]:
        """The model names the converter makes for `target` from source
        tensors of these shapes and dtypes (source pattern -> list, in
        collection order): one for a converter that stacks or merges,
        several for one that splits (a fused projection into three
        parameters).  Asked of the converter itself, run on meta tensors,
        where it has several targets (stacking experts, the common case,
        has one: `target`)."""
        pattern = next(iter(sources))
        if len(self.by_pattern[pattern].target_patterns) <= 1:
            return [target]
        tensors = {p: [torch.empty(shape, dtype=dt, device="meta") for shape, dt in v]
                   for p, v in sources.items()}
        return list(self.convert(self.converter(pattern), target, tensors))

    def provided(self, tensors: List[Tuple[str, Tuple[int, ...], torch.dtype]]) -> set:
        """The model names checkpoint tensors (key, shape, dtype) give
        values for: each key's name, and every parameter the converters they
        feed make (a split converter makes several from one key)."""
        out = set()
        feeding: Dict[str, Dict[str, list]] = {}
        for key, shape, dt in tensors:
            name, pattern = self(key)
            out.add(name)
            if pattern is not None:
                feeding.setdefault(name, {}).setdefault(pattern, []).append((key, shape, dt))
        for name, sources in feeding.items():
            ordered = {}
            for pattern, v in sources.items():
                at = {key: (shape, dt) for key, shape, dt in v}
                ordered[pattern] = [at[k] for k in self.order(list(at))]
            try:
                out.update(self.outputs(name, ordered))
            except Exception:      # shapes the converter refuses: the plan reports them
                pass
        return out


def resolve_dtype(dtype, config, pack_dtypes: List[torch.dtype]) -> torch.dtype:
    """`dtype` as transformers' from_pretrained resolves it: "auto" (its
    default) is the config's dtype, else the checkpoint's first floating
    dtype; a string names a torch dtype."""
    if dtype is None or dtype == "auto":
        want = getattr(config, "dtype", None)
        if want is None:
            want = next((d for d in pack_dtypes if d is not None and d.is_floating_point),
                        torch.get_default_dtype())
        dtype = want
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"dtype {dtype!r} names no torch dtype")
        dtype = getattr(torch, dtype)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, a string naming one, or 'auto', not {dtype!r}")
    return dtype


def skeleton(cls, config, dtype: torch.dtype, provided):
    """The model transformers' ``from_pretrained(dir, dtype=dtype)`` makes,
    with a placeholder (one element, expanded: no memory) for each
    parameter and buffer named in `provided` (model names the pack gives
    values for) instead of its weights.  What the pack does not provide is
    made as transformers makes a missing weight (initialised, and reported
    by transformers as newly initialised); buffers are computed exactly as
    that call computes them."""
    from ._loading import build_model
    with torch.device("meta"):
        probe = build_model(cls, config, dtype)
    concrete = type(probe)
    from ._plan import placeholder
    sd = {k: placeholder(v.shape, v.dtype) for k, v in probe.state_dict(keep_vars=True).items()
          if k in provided}
    del probe
    return concrete.from_pretrained(None, config=config, state_dict=sd, dtype=dtype)

