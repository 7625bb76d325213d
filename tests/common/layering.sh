#!/bin/sh
# Calls between the library's files go one way (tests/common/layering.py).
command -v python3 >/dev/null && command -v nm >/dev/null || exit 77
exec python3 "$top_srcdir/tests/common/layering.py" "$top_builddir"
