#!/bin/sh
# Any transformers model exactly as transformers runs it, on the host
# backend (tests/python/test_families.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_families.py" cpu
