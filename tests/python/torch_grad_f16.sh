#!/bin/sh
# An fp16 model's gradients reach the fp32 .grad exactly, widened and summed
# (tests/python/test_grad_f16.py cpu; the GPU lane runs it on cuda).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_grad_f16.py" cpu
