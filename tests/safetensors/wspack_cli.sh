#!/bin/sh
# wspack command-line behaviour: each case in cli/NAME.args runs wspack with
# those arguments (@T@ is a scratch directory) and must exit with cli/NAME.exit
# and print exactly cli/NAME.stderr, or stderr matching the regex in
# cli/NAME.grep.  No failed run may leave an output behind.
set -u
WSPACK=${top_builddir:-.}/tools/wspack
CASES=${top_srcdir:-..}/tests/safetensors/cli
[ -x "$WSPACK" ] || { echo "skip: $WSPACK not built"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/wsp-cli-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail=0

# Fixtures: a good checkpoint, one with a corrupt header, one with a huge
# length prefix, and an output that already exists.  Success prints nothing
# on stderr when it is not a terminal (no progress bar).
"$WSPACK" generate "$T/good.safetensors" --layers 1 --hidden 64 --intermediate 128 \
	--vocab 64 2>"$T/gen.err" || { echo "generate failed"; cat "$T/gen.err"; exit 1; }
[ -s "$T/gen.err" ] && { echo "generate wrote to stderr:"; cat "$T/gen.err"; fail=1; }
cp "$T/good.safetensors" "$T/bad.safetensors"
printf '\377' | dd of="$T/bad.safetensors" bs=1 seek=20 conv=notrunc 2>/dev/null
cp "$T/good.safetensors" "$T/huge.safetensors"
printf '\377\377\377\377\377\377\377\177' | dd of="$T/huge.safetensors" bs=1 conv=notrunc 2>/dev/null
mkdir "$T/exists.wsp"
# A sharded checkpoint directory with a stray *.safetensors file that its
# index does not name: converted with a note (cases convert-stray*).
"$WSPACK" generate "$T/stray" --layers 1 --hidden 64 --intermediate 128 --vocab 64 \
	--shard-size 32K 2>"$T/gen.err" || { echo "generate failed"; cat "$T/gen.err"; exit 1; }
cp "$T/stray/model-00001-of-"*.safetensors "$T/stray/extra.safetensors"

for args in "$CASES"/*.args; do
	name=$(basename "$args" .args)
	line=$(sed "s|@T@|$T|g" "$args")
	# shellcheck disable=SC2086  # word splitting of the argument line is wanted
	"$WSPACK" $line >"$T/out" 2>"$T/err"
	rc=$?
	want=$(cat "$CASES/$name.exit")
	if [ "$rc" != "$want" ]; then
		echo "FAIL $name: exit $rc, want $want"; cat "$T/err"; fail=1; continue
	fi
	if [ -f "$CASES/$name.stderr" ]; then
		sed "s|@T@|$T|g" "$CASES/$name.stderr" >"$T/want"
		if ! cmp -s "$T/want" "$T/err"; then
			echo "FAIL $name: stderr differs"; diff "$T/want" "$T/err"; fail=1; continue
		fi
	elif ! grep -Eq "$(cat "$CASES/$name.grep")" "$T/err" || [ "$(wc -l <"$T/err")" -ne 1 ]; then
		echo "FAIL $name: stderr does not match $(cat "$CASES/$name.grep")"; cat "$T/err"
		fail=1; continue
	fi
	if [ -e "$T/x.wsp" ]; then
		echo "FAIL $name: left $T/x.wsp behind"; rm -rf "$T/x.wsp"; fail=1; continue
	fi
	[ -z "$(ls "$T/exists.wsp")" ] || { echo "FAIL $name: touched exists.wsp"; fail=1; }
	echo "ok $name"
done

# The success path: generate -> convert -> info -> verify -> unpack -> cmp,
# with nothing on stderr (not a terminal: no progress bar).
ok() { "$@" >"$T/out" 2>"$T/err" && [ ! -s "$T/err" ] || { echo "FAIL: $*"; cat "$T/err"; fail=1; }; }
ok "$WSPACK" convert "$T/good.safetensors" -o "$T/good.wsp" --chunk-size 16K --level 3
ok "$WSPACK" info "$T/good.wsp"
grep -q '^tensors: *12$' "$T/out" && grep -q '^BF16 *12 ' "$T/out" &&
	grep -q '"generator":"wspager"' "$T/out" || { echo "FAIL info"; cat "$T/out"; fail=1; }
ok "$WSPACK" info --json --layers "$T/good.wsp"
grep -q '"layer_list"' "$T/out" && grep -q '"BF16"' "$T/out" || { echo "FAIL info --json"; fail=1; }
if [ -n "${PYTHON3:-}" ]; then
	"$PYTHON3" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["tensors"] == 12 and d["metadata"]["generator"] == "wspager"' \
		"$T/out" || { echo "FAIL info --json is not the expected JSON"; fail=1; }
fi
ok "$WSPACK" verify "$T/good.wsp" --threads 2
grep -q ': OK' "$T/out" || { echo "FAIL verify"; fail=1; }
ok "$WSPACK" unpack "$T/good.wsp" -o "$T/back"
cmp "$T/good.safetensors" "$T/back/good.safetensors" || { echo "FAIL unpack differs"; fail=1; }
ok "$WSPACK" convert "$T/good.safetensors" -o "$T/good.wsp" --force --codec raw
ok "$WSPACK" generate "$T/good.safetensors" --force --seed 9 --layers 1 --hidden 64 \
	--intermediate 128 --vocab 64 --dtype f16
echo "ok success path"

# A tensor in a shard that the index does not name is kept, with a note, as
# is the stray file; the pack holds every tensor and verifies.
cp -r "$T/stray" "$T/orphan"
sed -i '/"model.layers.0.input_layernorm.weight"/d' "$T/orphan/model.safetensors.index.json"
"$WSPACK" convert "$T/orphan" -o "$T/orphan.wsp" >"$T/out" 2>"$T/err" || { echo "FAIL orphan convert"; cat "$T/err"; fail=1; }
grep -q "^wspack: note: .*: tensor 'model.layers.0.input_layernorm.weight' is not in the index (kept)$" "$T/err" &&
	grep -q '^wspack: note: .*/orphan/extra.safetensors: not named in the index (ignored)$' "$T/err" &&
	[ "$(wc -l <"$T/err")" -eq 2 ] || { echo "FAIL orphan notes"; cat "$T/err"; fail=1; }
ok "$WSPACK" verify "$T/orphan.wsp"
grep -q ': OK: 4 layers, 12 tensors' "$T/out" || { echo "FAIL orphan verify"; cat "$T/out"; fail=1; }
echo "ok orphan tensor notes"

# --help and --version succeed on stdout.
"$WSPACK" --help | grep -q '^Usage: wspack' || { echo "FAIL --help"; fail=1; }
"$WSPACK" --version | grep -q '^wspack [0-9]' || { echo "FAIL --version"; fail=1; }
"$WSPACK" convert --help | grep -q 'convert IN' || { echo "FAIL convert --help"; fail=1; }
exit $fail
