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

from ._plan import Experts, TORCH_DTYPES


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


def _stack_differentiable(x: Experts, names, copies) -> Dict[str, torch.Tensor]:
    """_stack for training: the converter runs without autograd (it is
    loading code), so it is run on element indices instead, and the
    stacked parameter is gathered from the copies through those indices:
    the same values (checked the first time), and gradients flow back to
    each expert's copy.  Valid for converters that only rearrange
    elements (stack, concatenate, split, permute), as experts' do."""
    plain = None
    out = {}
    for attr, (name, converter, sources) in x.targets.items():
        index, at = {}, 0
        for pattern in sources:
            index[pattern] = []
            for c in copies:
                t = c[attr][pattern]
                index[pattern].append(torch.arange(at, at + t.numel(), dtype=torch.int64,
                                                   device=t.device).view(t.shape))
                at += t.numel()
        made = names.convert(converter, name, index)
        where = made[name] if name in made else next(iter(made.values()))
        flat = torch.cat([c[attr][pattern].reshape(-1) for pattern in sources for c in copies])
        out[attr] = flat[where]
        if attr not in x.checked:
            if plain is None:
                with torch.no_grad():
                    plain = _stack(x, names, copies)
            if not torch.equal(out[attr].detach(), plain[attr]):
                raise RuntimeError(f"{x.path}.{attr}: the model's converter does more than "
                                   "rearrange elements; its experts cannot train through "
                                   "wspager")
            x.checked.add(attr)
    return out


def bind(off, x: Experts, names, owners, replace, new_group, placeholder) -> None:
    """The stacked parameters of `x` become placeholders (made by
    `placeholder`, a :class:`_plan.Placeholders`); the module's forward
    acquires the routed experts around the model's own forward.

    Each pack layer holding expert tensors becomes a group of its own (in
    ``off.groups``, without hooks): a placeholder parameter per tensor,
    bound to the slot while the expert is copied.  The copies are made by
    autograd (``clone``), so with ``train=True`` each routed expert's
    gradient reaches its own placeholders and leaves through the pager as
    any paged weight's does (:mod:`wspager._train`)."""
    m, E = x.module, x.count
    dev = off.device_for(x.path)
    for attr in x.targets:
        p = m._parameters[attr]
        replace(owners, p, placeholder(tuple(p.shape), p.dtype, dev), requires_grad=False)
    groups = {}
    x.slot = {}    # (expert, attribute, source pattern) -> (group, index in it)
    x.checked = set()   # attributes whose differentiable stacking was checked
    for attr, (_, _, sources) in x.targets.items():
        for pattern, entries in sources.items():
            for e, en in enumerate(entries):
                g = groups.get(en.layer.index)
                if g is None:
                    g = groups[en.layer.index] = new_group(en.layer.index, en.layer.name)
                    g.experts = x
                    off.groups.append(g)
                t = en.tensor
                ph = placeholder(tuple(t.shape), en.dtype, dev)
                g.params.append((torch.nn.Parameter(ph, requires_grad=False), t.name,
                                 TORCH_DTYPES[t.dtype], tuple(t.shape)))
                g.placeholders.append(ph)
                x.slot[(e, attr, pattern)] = (g, len(g.params) - 1)
    per_expert = [[g for g in _unique(x.slot[(e, a, pt)][0] for a, (_, _, src) in
                                      x.targets.items() for pt in src)] for e in range(E)]
    off.experts.append((m, x))
    forward = type(m).forward      # the class's forward: it dispatches on the config

    def routed_forward(hidden_states, top_k_index, top_k_weights, *args, **kwargs):
        with torch.no_grad():
            hit = torch.unique(top_k_index).tolist()   # sorted
        chosen = [e for e in hit if 0 <= e < E]
        if not chosen:
            return forward(m, hidden_states, top_k_index, top_k_weights, *args, **kwargs)
        # The router has chosen: the pager reads exactly these next, and
        # learns nothing from their (data-dependent) order.
        layers = [g.index for g in _unique(g for e in chosen for g in per_expert[e])]
        off.where(layers[0])[0].hint_next(layers)
        copies = []
        for e in chosen:    # one expert's layers held at a time
            held = []
            try:
                for g in per_expert[e]:
                    off.acquire(g, routed=True)
                    held.append(g)
                copies.append({attr: {pt: _param(x, e, attr, pt).clone() for pt in src}
                               for attr, (_, _, src) in x.targets.items()})
            finally:
                # the copies are made (or queued on this stream, before the
                # release): the slots can go
                for g in reversed(held):
                    off.release(g)
        grad = torch.is_grad_enabled() and any(
            t.requires_grad for c in copies for ts in c.values() for t in ts.values())
        weights = (_stack_differentiable if grad else _stack)(x, names, copies)
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


def _param(x: Experts, e: int, attr: str, pattern: str) -> torch.nn.Parameter:
    g, i = x.slot[(e, attr, pattern)]
    return g.params[i][0]


def _unique(items):
    out = []
    for it in items:
        if all(it is not o for o in out):
            out.append(it)
    return out


def masters_of(x: Experts, attr: str, masters) -> list:
    """The masters standing for stacked parameter `attr`, expert by expert,
    in source-pattern order: (suffix, master)."""
    _, _, sources = x.targets[attr]
    out = []
    for e in range(x.count):
        for pattern in sources:
            g, i = x.slot[(e, attr, pattern)]
            out.append((f"{e}.{g.params[i][1].rsplit('.', 2)[-2]}", masters[g.index][i]))
    return out


def full(off, x: Experts, names, attr: str) -> torch.Tensor:
    """The whole stacked parameter `attr` of `x` in CPU memory (for state
    dicts): every expert read, one layer at a time."""
    from ._weights import read_tensors
    name, converter, sources = x.targets[attr]
    tensors = {}
    for pattern, entries in sources.items():
        ts = []
        for e, en in enumerate(entries):
            g, i = x.slot[(e, attr, pattern)]
            ts.append(read_tensors(off, g, [en.tensor.name])[0].to(en.dtype))
        tensors[pattern] = ts
    made = names.convert(converter, name, tensors)
    return made[name] if name in made else next(iter(made.values()))
