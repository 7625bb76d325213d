#!/bin/sh
# wspager.torch.from_pretrained on the host backend
# (tests/python/test_from_pretrained.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_from_pretrained.py" cpu
