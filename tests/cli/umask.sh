#!/bin/sh
# Outputs get the modes the umask gives (0755 directories and 0644 files
# under 022), as every other tool's do, not the private 0700 of mkdtemp.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
mode() { stat -c %a "$1"; }
for mask in 022 027; do
	umask $mask
	d=$TMP/m$mask
	mkdir "$d"
	"$WSPACK" generate --layers 1 --hidden 128 --intermediate 256 --vocab 256 \
		--shard-size 100K "$d/hf" >/dev/null 2>&1 || fail "generate"
	"$WSPACK" convert "$d/hf" -o "$d/p.wsp" >/dev/null 2>&1 || fail "convert"
	"$WSPACK" unpack "$d/p.wsp" -o "$d/out" >/dev/null 2>&1 || fail "unpack"
	want_dir=$(printf '%o' $(( 0777 & ~0$mask )))
	want_file=$(printf '%o' $(( 0666 & ~0$mask )))
	for x in "$d/hf" "$d/p.wsp" "$d/out"; do
		[ "$(mode "$x")" = "$want_dir" ] || fail "umask $mask: $x has mode $(mode "$x"), want $want_dir"
	done
	for x in "$d/p.wsp/manifest.wspm" "$d/p.wsp/shard-00000.wsd" "$d/out/model.safetensors.index.json" \
		"$d"/out/*.safetensors "$d"/hf/*.safetensors; do
		[ "$(mode "$x")" = "$want_file" ] || fail "umask $mask: $x has mode $(mode "$x"), want $want_file"
	done
done
exit 0
