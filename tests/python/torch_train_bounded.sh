#!/bin/sh
# Training inside a memory bound on the host backend: weights and AdamW
# state several times the pager's budgets, peak RSS growing by less than
# half of them, the saved pack equal to resident training
# (tests/python/test_train_bounded.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_train_bounded.py" cpu
