#!/bin/sh
# LoRA through peft on a paged frozen base, on the host backend
# (tests/python/test_lora.py cpu).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
"$PY" "$HERE/test_lora.py" cpu
