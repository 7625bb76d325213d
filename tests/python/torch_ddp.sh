#!/bin/sh
# torch's DistributedDataParallel (and transformers' Trainer, which wraps
# in it) over an offloaded model: two gloo ranks on this machine, a pack
# copy each (tests/python/test_ddp.py).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_ddp.py"
