#!/bin/sh
# Paged weights keep transformers' requires_grad and take no gradient
# without train=True (tests/python/test_frozen.py cpu, the host backend;
# the GPU lane runs it on cuda).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_frozen.py" cpu
