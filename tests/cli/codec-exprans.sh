#!/bin/sh
# wspack convert --codec exprans: the bf16 chunks are exponent-rANS coded
# (as small as zstd's, within 2%, on these Gaussian weights: both code the
# exponents near their entropy and keep sign and mantissa), the pack verifies, the
# pager streams it (host backend, every tensor's checksum checked by
# `wspager verify`), and `wspack unpack` gives back the checkpoint byte for
# byte; the default (auto: per chunk, exprans unless zstd is more than 3%
# smaller) is no larger than either (within the 3%), keeps the big bf16
# matrices in exprans, and `wspack info` shows the mix; an unknown codec
# name is a usage error naming the four.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
make_pack "$TMP/zstd.wsp" --codec zstd
"$WSPACK" convert "$TMP/model.safetensors" -o "$TMP/default.wsp" >/dev/null 2>"$TMP/err" ||
	{ cat "$TMP/err" >&2; fail "convert with the default codec"; }
"$WSPACK" convert "$TMP/model.safetensors" -o "$TMP/exprans.wsp" --codec exprans >/dev/null \
	2>"$TMP/err" || { cat "$TMP/err" >&2; fail "convert --codec exprans"; }
"$WSPACK" verify "$TMP/exprans.wsp" >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "verify"; }
"$WSPAGER" verify "$TMP/exprans.wsp" --device host >/dev/null 2>"$TMP/err" ||
	{ cat "$TMP/err" >&2; fail "wspager verify"; }
"$WSPACK" unpack "$TMP/exprans.wsp" -o "$TMP/back" >/dev/null 2>"$TMP/err" ||
	{ cat "$TMP/err" >&2; fail "unpack"; }
cmp "$TMP/model.safetensors" "$TMP/back/model.safetensors" || fail "unpacked bytes differ"
z=$(du -sb "$TMP/zstd.wsp" | cut -f1)
x=$(du -sb "$TMP/exprans.wsp" | cut -f1)
d=$(du -sb "$TMP/default.wsp" | cut -f1)
echo "pack bytes: zstd $z, exprans $x, default $d"
[ "$x" -lt $((z + z / 50)) ] || fail "exprans pack ($x bytes) more than 2% above zstd's ($z)"
[ "$d" -le "$x" ] || fail "the default pack ($d bytes) is larger than the exprans pack ($x bytes)"
[ "$d" -le $((z + z * 3 / 100)) ] || fail "the default pack ($d bytes) is 3% above zstd's ($z)"
"$WSPACK" info "$TMP/default.wsp" >"$TMP/info" || fail "info"
grep -E '^BF16 .* exprans [0-9]+ \(' "$TMP/info" >/dev/null ||
	{ cat "$TMP/info" >&2; fail "info: no exprans chunks for BF16"; }
[ "$z" -ne "$x" ] || fail "the zstd and exprans packs have the same size: same codec?"
if "$WSPACK" convert "$TMP/model.safetensors" -o "$TMP/bad.wsp" --codec lz4 >/dev/null 2>"$TMP/err"; then
	fail "--codec lz4 accepted"
fi
grep -q "auto, exprans, zstd or raw" "$TMP/err" || { cat "$TMP/err" >&2; fail "unclear --codec error"; }
exit 0
