"""A native AdamW for the fp32 host masters of :func:`wspager.torch.parameters`.

torch.optim.AdamW's CPU step makes five passes over each tensor, one
tensor at a time; this one calls ``wsp_adamw_step``: the same arithmetic in
one pass per element, split over all cores.
"""
from __future__ import annotations

import ctypes

import torch

from . import _lib as _c
from . import WspError


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW (decoupled weight decay, no amsgrad) for fp32,
    contiguous CPU parameters, stepped by the library's multi-threaded
    kernel.  `threads`: 0 for all cores."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, threads: int = 0):
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"AdamW: invalid lr {lr}, betas {betas}, eps {eps} or "
                             f"weight_decay {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.threads = threads

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        lib = _c.lib()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                for what, t in (("parameter", p), ("gradient", g)):
                    if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous():
                        raise TypeError(f"wspager AdamW steps fp32 contiguous CPU tensors; a "
                                        f"{what} is {t.dtype} on {t.device}"
                                        f"{'' if t.is_contiguous() else ', not contiguous'}")
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                st["step"] += 1
                hp = _c.AdamWParams(lr=group["lr"], beta1=b1, beta2=b2, eps=group["eps"],
                                    weight_decay=group["weight_decay"], step=st["step"],
                                    threads=self.threads)
                fp = ctypes.POINTER(ctypes.c_float)
                rc = lib.wsp_adamw_step(ctypes.cast(p.data_ptr(), fp), ctypes.cast(g.data_ptr(), fp),
                                        ctypes.cast(st["exp_avg"].data_ptr(), fp),
                                        ctypes.cast(st["exp_avg_sq"].data_ptr(), fp),
                                        p.numel(), ctypes.byref(hp))
                if rc < 0:
                    raise WspError(rc, "wsp_adamw_step: invalid arguments")
        return loss
