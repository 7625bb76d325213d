#!/bin/sh
# Small layers (a final norm) are kept on the device, not paged, unless
# keep_small=False, and stay paged with train=True (tests/python/
# test_small.py cpu, the host backend; the GPU lane runs it on cuda).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_small.py" cpu
