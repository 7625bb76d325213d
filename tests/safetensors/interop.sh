#!/bin/sh
# Interoperability with the reference safetensors package (from PyPI, in a
# venv under the build directory): checkpoints it writes convert and unpack
# byte-identically, it reads what unpack and generate write, and it agrees
# on names, dtypes, shapes, bytes and metadata.  Skips (77) without python3
# or without a registry to install from.
set -u
WSPACK=${top_builddir:-.}/tools/wspack
HERE=${top_srcdir:-..}/tests/safetensors
VENV=${top_builddir:-.}/tests/safetensors/venv
[ -x "$WSPACK" ] || { echo "skip: $WSPACK not built"; exit 77; }
[ -n "${PYTHON3:-}" ] || PYTHON3=$(command -v python3) || { echo "skip: no python3"; exit 77; }
if ! "$VENV/bin/python" -c 'import safetensors, numpy' 2>/dev/null; then
	rm -rf "$VENV"
	"$PYTHON3" -m venv "$VENV" || { echo "skip: python3 -m venv failed"; exit 77; }
	if ! timeout 600 "$VENV/bin/pip" install -q safetensors numpy; then
		echo "skip: pip cannot install safetensors and numpy (no registry?)"
		rm -rf "$VENV"
		exit 77
	fi
fi
PY="$VENV/bin/python"
T=$(mktemp -d "${TMPDIR:-/tmp}/wsp-interop-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
set -e
"$PY" "$HERE/interop.py" write "$T/in"

# roundtrip SOURCE...: convert, unpack, then every source file must come back
# byte-identical and look the same to the reference reader.
roundtrip() {
	name=$1; shift
	"$WSPACK" convert "$@" -o "$T/$name.wsp" --chunk-size 64K
	"$WSPACK" verify "$T/$name.wsp" >/dev/null
	"$WSPACK" unpack "$T/$name.wsp" -o "$T/$name.out"
	for src in "$@"; do
		if [ -d "$src" ]; then files=$(ls "$src"); dir=$src; else files=$(basename "$src"); dir=$(dirname "$src"); fi
		for f in $files; do
			cmp "$dir/$f" "$T/$name.out/$f"
			case $f in *.safetensors) "$PY" "$HERE/interop.py" same "$dir/$f" "$T/$name.out/$f";; esac
		done
	done
	echo "ok: $name"
}
roundtrip all-dtypes "$T/in/all-dtypes.safetensors"
roundtrip bf16-f8 "$T/in/bf16-f8.safetensors"
roundtrip sharded "$T/in/sharded"
roundtrip two-files "$T/in/all-dtypes.safetensors" "$T/in/bf16-f8.safetensors"
roundtrip empty-shared "$T/in/empty-shared.safetensors"
[ -f "$T/sharded.out/model.safetensors.index.json" ]

# The raw codec and no transform must round-trip too.
"$WSPACK" convert "$T/in/all-dtypes.safetensors" -o "$T/raw.wsp" --codec raw --no-transform
"$WSPACK" unpack "$T/raw.wsp" -o "$T/raw.out"
cmp "$T/in/all-dtypes.safetensors" "$T/raw.out/all-dtypes.safetensors"

# What wspack generates, the reference reads (single file and shards).
"$WSPACK" generate "$T/gen.safetensors" --layers 2 --hidden 128 --intermediate 256 --vocab 512
"$PY" "$HERE/interop.py" check "$T/gen.safetensors"
"$WSPACK" generate "$T/gen" --layers 2 --hidden 128 --intermediate 256 --vocab 512 --shard-size 100K
for f in "$T"/gen/*.safetensors; do
	"$PY" -c "import sys; from safetensors import safe_open; safe_open(sys.argv[1], 'numpy').keys()" "$f"
done
"$WSPACK" convert "$T/gen" -o "$T/gen.wsp"
"$WSPACK" unpack "$T/gen.wsp" -o "$T/gen.out"
for f in $(ls "$T/gen"); do cmp "$T/gen/$f" "$T/gen.out/$f"; done
echo "ok: generated"
