#!/bin/sh
# transformers' Trainer over an offloaded model, on the host backend
# (tests/python/test_hf_trainer.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_hf_trainer.py" cpu
