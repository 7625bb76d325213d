"""Building a model with no weights in memory (:func:`init_empty`)."""
from __future__ import annotations

from contextlib import contextmanager

import torch


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
