#!/bin/sh
# torch's FSDP2 (fully_shard) over an offloaded model, the paged
# parameters left to the pager: two gloo ranks on this machine, a pack
# copy each (tests/python/test_fsdp.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_fsdp.py"
