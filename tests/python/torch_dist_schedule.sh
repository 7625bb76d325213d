#!/bin/sh
# The order of the GPU exchanges of data parallel (tests/python/test_dist_schedule.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_dist_schedule.py"
