"""Which gradients leave the GPU as fp32 (``wsp_grad_push_f32``).

A bf16 gradient costs two bytes an element on the link, then a widening on
the host into its fp32 accumulator (two bytes read, four written).  In full
training that widening is bound by the host's memory bandwidth and outlasts
the backward (docs/PERFORMANCE.md).  The same gradient cast to fp32 on the
GPU costs four bytes on the link and nothing on the host: the pager copies
it straight into its accumulator.  Which is cheaper depends on the machine
and the step, so the share of gradient elements sent as fp32 is measured
while running: a backward ends waiting for two things, the copies still in
flight and the widening still left, and after each backward the share moves
a step toward the one that waited longer being shortened.  The sums are the
same bits either way (a widening is exact).
"""
from __future__ import annotations

import os

import torch

# The share moves by this much a backward: a few steps from any start to
# the balance, and a small swing about it.
STEP = 0.05
# Tensors smaller than this go as they are (not worth pinning an
# accumulator for; the pager stages them).
MIN_BYTES = 64 << 10
_NARROW = (torch.bfloat16, torch.float16)


class F32Share:
    """The share of a backward's gradient elements pushed as fp32."""

    def __init__(self, max_layer_bytes: int, on_gpu: bool):
        # A diagnostic for measuring the curve (bench/torch_train.py) and
        # for testing on the host backend: a fixed share, no measuring.
        fixed = os.environ.get("WSPAGER_GRAD_F32_SHARE")
        self.fixed = None if fixed is None else min(max(float(fixed), 0.0), 1.0)
        self.share = 0.5 if self.fixed is None else self.fixed
        # On the host backend both ways are host memory: only when fixed.
        self.enabled = on_gpu or self.fixed is not None
        # An fp32 gradient added to an earlier push is staged: it must fit
        # a staging buffer (the largest layer's bytes).
        self.max_elements = max_layer_bytes // 4
        self.elements = self.f32 = 0     # of this backward

    def pick(self, grad: torch.Tensor) -> bool:
        """Whether `grad` (contiguous, on its device) goes as fp32: while
        the backward's fp32 elements stay within the share, spread over it."""
        n = grad.numel()
        self.elements += n
        if not (self.enabled and grad.dtype in _NARROW and
                MIN_BYTES <= n * 4 and n <= self.max_elements):
            return False
        if self.f32 + n > self.share * self.elements:
            return False
        self.f32 += n
        return True

    def widen(self, grad: torch.Tensor):
        """`grad` as fp32 on its device, or None where the device has no
        memory for it (then no tensor goes as fp32 again: the link's bytes
        are not worth an out-of-memory)."""
        try:
            return grad.float()
        except torch.cuda.OutOfMemoryError:
            self.enabled = False
            return None

    def observe(self, copies_s: float, widening_s: float) -> None:
        """After a backward: how long the host then waited for the copies
        in flight, and then for the widening left."""
        self.elements = self.f32 = 0
        if self.fixed is not None or not self.enabled:
            return
        if widening_s > copies_s:
            self.share = min(1.0, self.share + STEP)
        elif copies_s > widening_s:
            self.share = max(0.0, self.share - STEP)
