#!/bin/sh
# Misuse of the Python package raises an exception, never a signal
# (tests/python/test_misuse.py: each case in a subprocess).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_misuse.py"
