#!/bin/sh
# wspager.torch.offload: bit-identical logits and generate() on the host
# backend (tests/python/test_offload.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_offload.py" cpu
