"""What an offloaded model's weights look like from outside its forward.

A paged parameter holds a NaN placeholder between forwards (see
:mod:`wspager.torch`).  Everything that reads weights outside a forward
must see the real ones or fail loudly, never the placeholders:

* ``state_dict()`` (and so ``save_pretrained``, ``torch.save``, Trainer
  checkpoints) gives the true values: a state-dict hook on each module
  that holds paged parameters reads them through the pager, one layer at a
  time, into CPU tensors (after training: the trained weights).  Tied
  parameters stay one tensor, as in a resident model's state dict.
* ``.to(dtype)``, ``.half()``, ``.to(device)``, ``.cuda()``... cannot
  reach weights the pager holds: they raise before anything moves, rather
  than convert the buffers and leave the weights as they were.  A call
  that changes nothing (``.to(model.device)``) is let through.
* After :func:`wspager.torch.remove` the model has no weights: a forward
  of any module that had paged parameters raises.
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Tuple

import torch

from ._plan import placeholder


def read_tensors(off, g, names) -> List[torch.Tensor]:
    """Tensors `names` of group g's pack layer, copied to CPU memory (one
    acquire of the layer)."""
    held = g.depth > 0
    pager, dev = off.where(g.index)
    layer = g.layer if held else pager.acquire(g.index, off._stream(dev))
    try:
        out = []
        for name in names:
            info = layer.info(name)
            out.append(off._span(g, layer.address(name), info.nbytes,
                                 _torch_dtype(info.dtype), info.shape).to("cpu", copy=True))
        return out
    finally:
        if not held:
            layer.release(off._stream(dev))


def _torch_dtype(name: str) -> torch.dtype:
    from .torch import TORCH_DTYPES
    return TORCH_DTYPES[name]


class StateDictSource:
    """Real values of paged parameters for state dicts, by parameter."""

    def __init__(self, off, model: torch.nn.Module):
        self.off = off
        # id(parameter) -> how to get its value: ("tensor", group, pack
        # name, the model's dtype) or ("experts", _plan.Experts, attribute)
        self.how: Dict[int, Tuple] = {}
        for g in off.groups:
            for (p, tname, _, _), ph in zip(g.params, g.placeholders):
                self.how[id(p)] = ("tensor", g, tname, ph.dtype)
        for m, x in off.experts:
            for attr in x.targets:
                self.how[id(m._parameters[attr])] = ("experts", x, attr)
        # Values made for one state_dict() call, shared by tied parameters:
        # id(state dict) -> id(parameter) -> tensor; gone with the dict.
        self.made: Dict[int, Dict[int, torch.Tensor]] = {}

    def attach(self, model: torch.nn.Module) -> List:
        """A state-dict hook on every module holding paged parameters."""
        handles = []
        for m in model.modules():
            mine = [(attr, id(p)) for attr, p in m._parameters.items()
                    if p is not None and id(p) in self.how]
            if mine:
                handles.append(m.register_state_dict_post_hook(
                    lambda mod, sd, prefix, meta, mine=mine: self._fill(sd, prefix, mine)))
        return handles

    def _fill(self, sd, prefix: str, mine) -> None:
        if id(sd) not in self.made:
            if self.off.trainer is not None:
                self.off.trainer.wait()   # the last steps' weights are in the pager
            self.made[id(sd)] = {}
            weakref.finalize(sd, self.made.pop, id(sd), None)
        made = self.made[id(sd)]
        for attr, pid in mine:
            key = prefix + attr
            if key not in sd:          # keep_vars=False/True both keep every key
                continue
            if pid not in made:
                made[pid] = self._value(self.how[pid])
            sd[key] = made[pid]

    def _value(self, how) -> torch.Tensor:
        if how[0] == "tensor":
            _, g, tname, dtype = how
            return read_tensors(self.off, g, [tname])[0].to(dtype)
        from ._experts import full
        _, x, attr = how
        return full(self.off, x, self.off.names, attr)


def guard_conversions(off, model: torch.nn.Module) -> None:
    """Make ``.to()``/``.half()``/``.cuda()``... of any module above a paged
    parameter raise when they would change a paged weight's dtype or
    device (recorded in ``off.restore``, undone by remove).  One exception:
    a model that converts one of its own modules to another dtype while
    its forward runs (SwitchTransformers' and NLLB-MoE's routers cast
    their classifier to fp32 at every forward) gets what it asked for: the
    paged weights under that module take the new dtype, cast at each use
    as weights the model keeps in another dtype than the pack's are
    (without ``train=True``, whose masters have the pack's dtype)."""
    # a scalar of each floating dtype on each device among the paged
    # weights (over several devices, moving all to one is refused too)
    probes = {}
    for g in off.groups:
        for p, _, dtype, _ in g.params:
            if dtype.is_floating_point:
                probes.setdefault((p.dtype, p.device), torch.empty((), dtype=p.dtype,
                                                                   device=p.device))
    # every module above a paged parameter, from the parameters' names
    where = off.saved.by_param      # parameter id -> (group, index in it)
    above = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in where:
            parts = name.split(".")[:-1]
            above.update(".".join(parts[:k]) for k in range(len(parts) + 1))
    for path, m in model.named_modules():
        if path not in above:
            continue
        mine = [where[id(p)] for p in m.parameters() if id(p) in where]

        def guarded(fn, *args, _orig=m._apply, _path=path, _mine=mine, **kwargs):
            running = bool(off.saved.ctx) and off.trainer is None   # inside the model's forward
            for probe in probes.values():
                after = fn(probe)
                if after.device != probe.device or (after.dtype != probe.dtype and not running):
                    raise RuntimeError(
                        f"{_path or type(model).__name__}: its weights are paged by wspager "
                        f"({probe.dtype}, {probe.device}); converting them to {after.dtype} "
                        f"on {after.device} would change its buffers but not the pager's "
                        "weights.  Offload it again with the dtype and device you want "
                        "(convert the checkpoint in that dtype), or wspager.torch.remove "
                        "first.")
            if running:
                for g, i in _mine:
                    ph = g.placeholders[i]
                    to = fn(torch.empty((), dtype=ph.dtype, device=ph.device)).dtype
                    if to != ph.dtype:
                        g.placeholders[i] = placeholder(tuple(ph.shape), to, ph.device)
                        if g.depth == 0:
                            g.params[i][0].data = g.placeholders[i]
            return _orig(fn, *args, **kwargs)
        m._apply = guarded
        off.restore.append((m, "_apply"))


def forbid_forward(modules) -> List:
    """After remove: a forward of any of `modules` raises."""
    def refuse(mod, _args):
        raise RuntimeError(f"{type(mod).__name__}: this model's weights were paged by wspager, "
                           "which wspager.torch.remove took off; it holds placeholders, not "
                           "weights (offload it again, or load it with transformers)")
    return [m.register_forward_pre_hook(refuse) for m in modules]
