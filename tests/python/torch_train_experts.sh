#!/bin/sh
# Routed experts train, on the host backend
# (tests/python/test_train_experts.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_train_experts.py" cpu
