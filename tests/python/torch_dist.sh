#!/bin/sh
# Data parallel over torch.distributed: two gloo ranks on this machine, a
# pack copy and a host tier each (tests/python/test_dist.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_dist.py"
