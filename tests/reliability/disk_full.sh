#!/bin/sh
# The disk fills during wspack convert and unpack (item 30).  Emulated
# without root by RLIMIT_FSIZE: with SIGXFSZ ignored, a write past the limit
# fails with EFBIG ("File too large"), as ENOSPC would on a full disk.  The
# tool must exit 1 naming the file it was writing, and leave neither the
# output nor its temporary; the same command without the limit succeeds.
set -u
bin=$top_builddir/tools
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsp-diskfull-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 5 MiB of random bf16 weights: zstd cannot shrink them below the limit.
"$bin/wspack" generate "$dir/ck" --layers 4 --hidden 256 --intermediate 512 \
	--vocab 1024 >/dev/null 2>&1 || fail "generate"

# Runs "$@" with a file-size limit of about 128 KiB (ulimit -f counts 512-byte
# blocks in dash and 1 KiB blocks in bash: 128 or 256 KiB, both far below
# one shard).  stderr goes to a fresh file, which stays under the limit.
limited() {
	( trap '' XFSZ; ulimit -f 256 && exec "$@" ) >/dev/null 2>"$dir/err"
}
# Nothing named $1 or $1.tmp-* may be left in $dir.
nothing_left() {
	left=$(cd "$dir" && ls -d "$1" "$1".tmp-* 2>/dev/null)
	[ -z "$left" ] || { ls -la "$dir"; fail "$2 left $left behind"; }
}

for codec in zstd raw; do
	limited "$bin/wspack" convert "$dir/ck" -o "$dir/out.wsp" --codec $codec --threads 2
	rc=$?
	echo "convert ($codec) under the limit: exit $rc: $(cat "$dir/err")"
	[ $rc -eq 1 ] || fail "convert under the limit exited $rc, want 1"
	grep -q "out\.wsp\.tmp-[^/]*/shard-00000\.wsd: .*File too large" "$dir/err" ||
		fail "the message does not name the shard and EFBIG"
	nothing_left out.wsp "a failed convert"
done

"$bin/wspack" convert "$dir/ck" -o "$dir/out.wsp" --threads 2 >/dev/null 2>"$dir/err" ||
	{ cat "$dir/err"; fail "convert without the limit"; }
"$bin/wspack" verify "$dir/out.wsp" >"$dir/verify" 2>&1 || { cat "$dir/verify"; fail "verify"; }
echo "without the limit: $(cat "$dir/verify")"
[ -z "$(cd "$dir" && ls -d out.wsp.tmp-* 2>/dev/null)" ] || fail "the good convert left a temporary"

limited "$bin/wspack" unpack "$dir/out.wsp" -o "$dir/un"
rc=$?
echo "unpack under the limit: exit $rc: $(cat "$dir/err")"
[ $rc -eq 1 ] || fail "unpack under the limit exited $rc, want 1"
grep -q "un\.tmp-[^/]*/ck: .*File too large" "$dir/err" ||
	fail "the message does not name the output file and EFBIG"
nothing_left un "a failed unpack"

"$bin/wspack" unpack "$dir/out.wsp" -o "$dir/un" >/dev/null 2>"$dir/err" ||
	{ cat "$dir/err"; fail "unpack without the limit"; }
cmp "$dir/ck" "$dir/un/ck" || fail "unpacked file differs from the checkpoint"
echo "unpack without the limit: byte-identical to the checkpoint"
