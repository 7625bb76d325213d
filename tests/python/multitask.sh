#!/bin/sh
# examples/torch_multitask.py: a model grouped by its modules through
# wspager.torch.convert (the C converter's explicit map), whose per-task
# heads are read from disk only when their task runs.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
cd "$T" || fail "cd"
"$PY" "$top_srcdir/examples/torch_multitask.py" "$T/multitask" || fail "examples/torch_multitask.py"
