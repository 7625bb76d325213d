#!/bin/sh
# wspager.torch.AdamW against torch.optim.AdamW (tests/python/test_adamw.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_adamw.py"
