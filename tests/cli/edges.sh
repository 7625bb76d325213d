#!/bin/sh
# Edges: a host cache smaller than one default page gets smaller pages (and
# one too small names the least that works); a pack of an empty checkpoint
# is refused by run with a clear message; verify checks the padding that
# wspack(5) says is zero.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
make_pack "$TMP/pack"
# layers of ~128 KiB and a 1 MiB budget: once zero pages of 2 MiB
"$WSPACK" generate --layers 2 --hidden 128 --intermediate 256 --vocab 256 \
	"$TMP/small.safetensors" >/dev/null 2>&1 || fail "generate"
"$WSPACK" convert "$TMP/small.safetensors" -o "$TMP/small" >/dev/null 2>&1 || fail "convert"
"$WSPAGER" run "$TMP/small" --device host --passes 1 --host-cache 1M >"$TMP/out" 2>"$TMP/err" ||
	{ cat "$TMP/err" >&2; fail "run with a 1 MiB host cache"; }
grep -q "is smaller than a page of 2.00 MiB: using 64.00 KiB pages" "$TMP/err" || fail "no notice about smaller pages"
rc=0
"$WSPAGER" run "$TMP/pack" --device host --passes 1 --host-cache 4K >"$TMP/out" 2>"$TMP/err" || rc=$?
[ $rc = 1 ] || fail "run with a 4 KiB host cache: exit $rc, want 1"
grep -q "the host cache needs at least" "$TMP/err" || { cat "$TMP/err" >&2; fail "no minimum named"; }
# an empty checkpoint: 8-byte length, "{}", no data
printf '\002\000\000\000\000\000\000\000{}' >"$TMP/empty.safetensors"
"$WSPACK" convert "$TMP/empty.safetensors" -o "$TMP/empty.wsp" >/dev/null 2>&1 || fail "convert empty"
rc=0
"$WSPAGER" run "$TMP/empty.wsp" --device host >"$TMP/out" 2>"$TMP/err" || rc=$?
[ $rc = 1 ] || fail "run of an empty pack: exit $rc, want 1"
grep -q "holds no layers" "$TMP/err" || { cat "$TMP/err" >&2; fail "empty pack: message"; }
grep -q "Invalid argument" "$TMP/err" && fail "empty pack: a bare EINVAL"
# a non-zero byte in the padding after the last layer
cp -r "$TMP/pack" "$TMP/pad"
size=$(stat -c %s "$TMP/pad/shard-00000.wsd")
printf '\007' | dd of="$TMP/pad/shard-00000.wsd" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
"$WSPAGER" verify "$TMP/pack" --device host >/dev/null 2>&1 || fail "verify of the good pack"
rc=0
"$WSPAGER" verify "$TMP/pad" --device host >"$TMP/out" 2>"$TMP/err" || rc=$?
[ $rc = 1 ] || fail "verify with dirty padding: exit $rc, want 1"
grep -q "padding after .* is 0x07" "$TMP/err" || { cat "$TMP/err" >&2; fail "padding: message"; }
rc=0
"$WSPACK" verify "$TMP/pad" >"$TMP/out" 2>"$TMP/err" || rc=$?
[ $rc = 1 ] || fail "wspack verify with dirty padding: exit $rc, want 1"
exit 0
