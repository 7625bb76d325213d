"""Routed experts, paged: a mixture-of-experts module reads only the
experts its tokens are routed to, and computes them with the experts
implementation the model is configured with.

transformers computes a block's experts with one module holding stacked
parameters (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I]) that its
loader builds from the checkpoint's per-expert matrices with a converter;
packs keep each expert's matrices apart, usually one pack layer per
expert.  Around each forward of such a module, the experts the router
picked are acquired, the same converter stacks just their matrices (so
the layout is exactly the one transformers builds), and the module's own
forward (eager, ``grouped_mm``, ``batched_mm``, or whatever the config
names) runs over those ``k`` experts with the routing indices renumbered
0..k-1 in the same order.  Each routed expert then meets the same tokens
in the same order as in the resident model.
"""
from __future__ import annotations

from typing import Dict, List

import torch

from ._plan import Experts, TORCH_DTYPES, placeholder


def _copies(off, x: Experts, expert: int, held: Dict[int, object], groups
            ) -> Dict[str, Dict[str, torch.Tensor]]:
    """attribute -> source pattern -> a copy of `expert`'s pack tensor, in
    the model's dtype, from the acquired layers `held`."""
    out: Dict[str, Dict[str, torch.Tensor]] = {}
    for attr, (_, _, sources) in x.targets.items():
        for pattern, entries in sources.items():
            en = entries[expert]
            t = en.tensor
            v = off._span(groups[en.layer.index], held[en.layer.index].address(t.name),
                          t.nbytes, TORCH_DTYPES[t.dtype], tuple(t.shape))
            out.setdefault(attr, {})[pattern] = v.clone() if v.dtype == en.dtype else v.to(en.dtype)
    return out


def _stack(x: Experts, names, copies: List[Dict[str, Dict[str, torch.Tensor]]]
           ) -> Dict[str, torch.Tensor]:
    """attribute -> the stacked parameter the model's converter makes of
    the experts whose `copies` are given (in that order)."""
    out = {}
    for attr, (name, converter, sources) in x.targets.items():
        tensors = {pattern: [c[attr][pattern] for c in copies] for pattern in sources}
        made = names.convert(converter, name, tensors)
        out[attr] = made[name] if name in made else next(iter(made.values()))
    return out


def bind(off, x: Experts, names, owners, replace, group_of) -> None:
    """The stacked parameters of `x` become placeholders; the module's
    forward acquires the routed experts around the model's own forward."""
    m, E = x.module, x.count
    for attr in x.targets:
        p = m._parameters[attr]
        replace(owners, p, placeholder(tuple(p.shape), p.dtype, off.device))
    per_expert = [x.layers_of(e) for e in range(E)]
    groups = {i: group_of(i) for layers in per_expert for i in layers}
    off.experts.append((m, x))
    forward = type(m).forward      # the class's forward: it dispatches on the config

    def routed_forward(hidden_states, top_k_index, top_k_weights, *args, **kwargs):
        with torch.no_grad():
            hit = torch.unique(top_k_index).tolist()   # sorted
        chosen = [e for e in hit if 0 <= e < E]
        if not chosen:
            return forward(m, hidden_states, top_k_index, top_k_weights, *args, **kwargs)
        layers = []
        for e in chosen:
            layers += [i for i in per_expert[e] if i not in layers]
        # The router has chosen: the pager reads exactly these next, and
        # learns nothing from their (data-dependent) order.
        off.pager.hint_next(layers)
        copies = []
        for e in chosen:    # one expert's layers held at a time
            held = {}
            try:
                for i in per_expert[e]:
                    held[i] = off.pager.acquire(i, off._stream(), routed=True)
                copies.append(_copies(off, x, e, held, groups))
            finally:
                # the copies are made (or queued on this stream, before the
                # release): the slots can go
                for layer in held.values():
                    layer.release(off._stream())
        weights = _stack(x, names, copies)
        del copies
        k = len(chosen)
        renumber = torch.full((E + 1,), k, dtype=top_k_index.dtype, device=top_k_index.device)
        renumber[torch.tensor(chosen, device=top_k_index.device)] = torch.arange(
            k, dtype=top_k_index.dtype, device=top_k_index.device)
        saved = {attr: m._parameters[attr] for attr in weights}
        saved_count = m.num_experts
        try:
            for attr, w in weights.items():
                m._parameters[attr] = w
            m.num_experts = k
            return forward(m, hidden_states, renumber[top_k_index], top_k_weights,
                           *args, **kwargs)
        finally:
            m._parameters.update(saved)
            m.num_experts = saved_count
    m.forward = routed_forward
    off.restore.append((m, "forward"))


def full(off, x: Experts, names, attr: str) -> torch.Tensor:
    """The whole stacked parameter `attr` of `x` in CPU memory (for state
    dicts): every expert read, one layer at a time."""
    from ._weights import read_tensors
    name, converter, sources = x.targets[attr]
    tensors = {pattern: [read_tensors(off, off.group_for(en.layer.index), [en.tensor.name])[0]
                         .to(en.dtype) for en in entries]
               for pattern, entries in sources.items()}
    made = names.convert(converter, name, tensors)
    return made[name] if name in made else next(iter(made.values()))
