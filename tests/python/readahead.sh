#!/bin/sh
# The threads that read (and pin) the data-parallel feeds' parts ahead
# (tests/python/test_readahead.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_readahead.py"
