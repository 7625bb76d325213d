#!/bin/sh
# Training one task's head through the pager reads and writes only that
# task's module (tests/python/test_train_tasks.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_train_tasks.py"
