#!/bin/sh
# wspager.torch.step_in_backward on the host backend: ten steps inside the
# backward equal resident training exactly (tests/python/test_step_in_backward.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_step_in_backward.py" cpu
