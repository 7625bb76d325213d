"""Which gradients leave the GPU as fp32 (``wsp_grad_push_f32``).

A bf16 gradient costs two bytes an element on the link, then a widening on
the host into its fp32 accumulator (two bytes read, four written).  In full
training that widening is bound by the host's memory bandwidth and outlasts
the backward (docs/PERFORMANCE.md).  The same gradient cast to fp32 on the
GPU costs four bytes on the link and nothing on the host, when it is the
first since its accumulator was zeroed: the pager copies it straight in.
(Added to an earlier push it would be staged and added either way, so a
backward that accumulates sends everything as it is.)  Sending all as fp32
makes the link the bottleneck instead; the best share lies between, and
where depends on the machine and the step (lower where the pager widens
gradients as they land, reading them back from the CPU's cache: docs/
PERFORMANCE.md, seventeenth session), so it is found while running:
after every WINDOW backwards that started from zeroed accumulators, the
share moves a step, on in the same direction while the backward (from its
first hook to its gradients bound, the median of the window) got faster,
the other way when it got slower.  The sums are the same bits either way
(a widening is exact).
"""
from __future__ import annotations

import os
import time

import torch

# The share moves by this much a window: a few steps from the start to
# the best share, then a swing of a step or two about it.
STEP = 0.05
# Backwards judged together, by their median: a backward's time varies by a
# few per cent from one to the next, more than a step of the share changes
# it near the best, and judged one by one the share wandered from 0.2 to
# 0.8 in a dozen backwards (docs/PERFORMANCE.md).
WINDOW = 3
# Where it starts: the best measured on a 16-core host with a 55 GB/s link
# since gradients are widened as they land (docs/PERFORMANCE.md, eighteenth
# session: every bf16 gradient sent as it is was faster than the share
# measured from 0.3, at a link-bound and at a compute-bound batch); where
# the host's cache does not keep the landed chunks, it moves from there.
START = 0.0
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
        self.share = START if self.fixed is None else self.fixed
        # On the host backend both ways are host memory: only when fixed.
        self.enabled = on_gpu or self.fixed is not None
        # An fp32 gradient added to an earlier push is staged: it must fit
        # a staging buffer (the largest layer's bytes).
        self.max_elements = max_layer_bytes // 4
        self.elements = self.f32 = 0     # of this backward
        self.t0 = None                   # when this backward began
        self.last = None                 # seconds of the last judged window (median)
        self.window = []                 # seconds of this window's backwards
        self.direction = 1

    def begin(self) -> None:
        """A backward's first hook (a backward that raised before its end
        leaves nothing behind: its counts start over here)."""
        self.t0 = time.perf_counter()
        self.elements = self.f32 = 0

    def pick(self, grad: torch.Tensor, fresh: bool) -> bool:
        """Whether `grad` (contiguous, on its device) goes as fp32: its
        accumulator zeroed since its last push (`fresh`), and the
        backward's fp32 elements within the share, spread over it."""
        n = grad.numel()
        self.elements += n
        if not (fresh and self.enabled and grad.dtype in _NARROW and
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

    def end(self, fresh: bool, hold: bool = False) -> None:
        """The backward's gradients are bound; `fresh`: it started from
        zeroed accumulators (only those send fp32: only they are judged).
        `hold`: the pager is timing who decodes (wsp_who_decodes(3)) over
        these same steps, switching the form of the weights every few of
        them; the share stays where it is and judges nothing until that is
        over, then starts its windows afresh.  Two measurements of the same
        steps that each move what the other times confound each other: the
        trial switches form every three windows of a step, the share judges
        every three backwards, and the two can lock in step, the share
        moving with the form."""
        seconds = time.perf_counter() - self.t0 if self.t0 is not None else None
        self.t0 = None
        if hold:
            self.window, self.last = [], None
            return
        if fresh and seconds is not None and self.fixed is None and self.enabled:
            self.judge(seconds)

    def judge(self, seconds: float) -> None:
        """A judged backward of `seconds`; the share moves a step once the
        window is full."""
        self.window.append(seconds)
        if len(self.window) < WINDOW:
            return
        seconds = sorted(self.window)[WINDOW // 2]
        self.window = []
        if self.last is not None and seconds > self.last:
            self.direction = -self.direction
        self.last = seconds
        self.share = min(1.0, max(0.0, self.share + self.direction * STEP))
