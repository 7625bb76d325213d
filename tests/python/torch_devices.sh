#!/bin/sh
# A model over several devices, on the host backend: two host pagers
# (tests/python/test_devices.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_devices.py" cpu
