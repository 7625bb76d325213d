#!/bin/sh
# wspager.torch.from_pretrained as a new user meets it (paths, the default
# device, model classes, generation config, progress): test_first_contact.py
# on a machine whose torch has no CUDA the default is the CPU.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
dev=$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")') ||
	fail "torch does not import"
"$PY" "$HERE/test_first_contact.py" "$dev"
