#!/bin/sh
# wspager.torch.offload(train=True): gradients through the pager's
# write-back path equal the resident model's exactly, on the host backend
# (tests/python/test_train.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_train.py" cpu
