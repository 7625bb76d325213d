#!/bin/sh
# The README's "From PyTorch" examples run on the host backend:
# examples/torch_generate.py prints 4 + 16 token ids, examples/torch_lora.py
# trains adapters for 4 steps and saves them.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/python/lib.sh"
cd "$T" || fail "cd"
"$PY" "$top_srcdir/examples/torch_generate.py" "$T/tiny-llama" cpu >"$T/out" 2>"$T/err" ||
	{ cat "$T/err" >&2; fail "examples/torch_generate.py"; }
cat "$T/out"
"$PY" -c 'import ast, sys; ids = ast.literal_eval(open(sys.argv[1]).readline()); assert len(ids[0]) == 20, ids' "$T/out" ||
	fail "unexpected output"
[ -f "$T/tiny-llama.wsp/manifest.wspm" ] || fail "no pack beside the checkpoint"
# The LoRA example: adapters train over the paged frozen base and are saved
"$PY" "$top_srcdir/examples/torch_lora.py" "$T/tiny-llama" cpu "$T/lora" >"$T/out" 2>"$T/err" ||
	{ cat "$T/err" >&2; fail "examples/torch_lora.py"; }
cat "$T/out"
[ "$(grep -c '^step [0-9]: loss' "$T/out")" = 4 ] || fail "examples/torch_lora.py: no 4 steps"
[ -f "$T/lora/adapter_model.safetensors" ] || fail "examples/torch_lora.py: no adapters saved"
