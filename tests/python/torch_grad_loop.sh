#!/bin/sh
# .grad after backward, clipping, accumulation and zero_grad through the
# pager, bit-identical to the resident model (tests/python/test_grad_loop.py cpu;
# the GPU lane runs it on cuda).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_grad_loop.py" cpu
