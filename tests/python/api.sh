#!/bin/sh
# The Python package's numpy-level API (tests/python/test_api.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_api.py" "$top_builddir/tests/python/struct_layout"
