#!/bin/sh
# The thread issuing the data-parallel feed's exchanges (tests/python/test_issuer.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_issuer.py"
