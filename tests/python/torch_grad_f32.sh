#!/bin/sh
# Gradients pushed as fp32 (all, half, none) train bit-identically; the
# share's rule (tests/python/test_grad_f32.py cpu; the GPU lane runs it on cuda).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_grad_f32.py" cpu
