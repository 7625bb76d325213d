#!/bin/sh
# An offloaded model's state_dict/save_pretrained give its true weights;
# conversions and a forward after remove raise (tests/python/test_weights.py
# cpu, the host backend; the GPU lane runs it on cuda).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_weights.py" cpu
