#!/bin/sh
# The README's "From PyTorch" example runs (examples/torch_generate.py, host
# backend) and prints 4 + 16 token ids.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
cd "$T" || fail "cd"
"$PY" "$top_srcdir/examples/torch_generate.py" "$T/tiny-llama" cpu >"$T/out" 2>"$T/err" ||
	{ cat "$T/err" >&2; fail "examples/torch_generate.py"; }
cat "$T/out"
"$PY" -c 'import ast, sys; ids = ast.literal_eval(open(sys.argv[1]).readline()); assert len(ids[0]) == 20, ids' "$T/out" ||
	fail "unexpected output"
[ -f "$T/tiny-llama.wsp/manifest.wspm" ] || fail "no pack beside the checkpoint"
