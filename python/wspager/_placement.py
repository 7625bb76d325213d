"""Where each pack layer goes when a model is offloaded over several
devices: consecutive units (the blocks transformers never splits, named
in ``_no_split_modules``; any other layer on its own), balanced by the
bytes of their pack layers, or an Accelerate-style ``device_map``
(module path -> device, the longest matching path wins)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ._plan import inside


def units_of(model: torch.nn.Module) -> List[str]:
    """Module paths of the blocks the model names in ``_no_split_modules``,
    innermost first."""
    split = set(getattr(model, "_no_split_modules", None) or [])
    units = [p for p, m in model.named_modules(remove_duplicate=False)
             if type(m).__name__ in split]
    units.sort(key=len, reverse=True)
    return units


def unit_of(path: str, units: Sequence[str]) -> Optional[str]:
    """The innermost unit holding `path`, or None."""
    for u in units:
        if inside(path, u):
            return u
    return None


def _by_map(device_map: Dict[str, torch.device]) -> Callable[[str], Optional[torch.device]]:
    keys = sorted(device_map, key=len, reverse=True)

    def device(path: str) -> Optional[torch.device]:
        for k in keys:
            if inside(path, k):
                return device_map[k]
        return None
    return device


def place(model: torch.nn.Module, layers: Dict[int, object], devices: List[torch.device],
          device_map: Optional[Dict[str, torch.device]] = None
          ) -> Tuple[Dict[int, int], Callable[[str], torch.device]]:
    """(pack layer index -> position in `devices`, module path -> device).
    `layers`: index -> the pack's layer (name, raw_bytes), in any order;
    module paths outside every placed unit go to the first device."""
    units = units_of(model)
    order = sorted(layers)
    unit = {i: unit_of(layers[i].name, units) or layers[i].name for i in order}
    if device_map is not None:
        found = _by_map(device_map)
        where = {}
        for i in order:
            d = found(unit[i]) or found(layers[i].name)
            if d is None:
                raise ValueError(f"device_map places no module holding pack layer "
                                 f"{layers[i].name!r} (give its path or a parent's)")
            where[i] = devices.index(d)

        def path_device(path: str) -> torch.device:
            return found(path) or devices[0]
        return where, path_device
    # consecutive units (in the order of their first pack layer), each
    # device about an equal share of the bytes
    unit_bytes: Dict[str, int] = {}
    for i in order:
        unit_bytes[unit[i]] = unit_bytes.get(unit[i], 0) + layers[i].raw_bytes
    total = sum(unit_bytes.values()) or 1
    unit_at: Dict[str, int] = {}
    done = 0
    for u, b in unit_bytes.items():
        # the device whose share the middle of this unit falls in
        unit_at[u] = min(int((done + b / 2) * len(devices) / total), len(devices) - 1)
        done += b
    where = {i: unit_at[unit[i]] for i in order}
    placed = sorted(unit_at, key=len, reverse=True)

    def path_device(path: str) -> torch.device:
        for u in placed:
            if inside(path, u):
                return devices[unit_at[u]]
        return devices[0]
    return where, path_device
