#!/bin/sh
# wspager.torch.offload refuses a pack that does not fit, naming each
# difference, and leaves the model untouched (tests/python/test_mismatch.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_mismatch.py"
