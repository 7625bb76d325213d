#!/bin/sh
# A FIFO (or any special file) where a regular file is read is refused at
# once with "not a regular file": no command may block on it.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
command -v timeout >/dev/null || skip "timeout(1) not available"
make_pack "$TMP/pack"
refused() {   # refused WHY CMD...: exits 1 within 20 s naming the special file
	why=$1; shift
	rc=0
	timeout 20 "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
	[ $rc = 124 ] && fail "$why: blocked on a FIFO"
	[ $rc = 1 ] || { cat "$TMP/err" >&2; fail "$why: exit $rc, want 1"; }
	grep -q "not a regular file" "$TMP/err" || { cat "$TMP/err" >&2; fail "$why: message"; }
}
mkdir "$TMP/fifo.wsp" && mkfifo "$TMP/fifo.wsp/manifest.wspm"
for cmd in info verify; do
	refused "wspager $cmd" "$WSPAGER" $cmd "$TMP/fifo.wsp"
done
refused "wspager run" "$WSPAGER" run "$TMP/fifo.wsp" --device host
refused "wspack info" "$WSPACK" info "$TMP/fifo.wsp"
refused "wspack unpack" "$WSPACK" unpack "$TMP/fifo.wsp" -o "$TMP/out1"
mkdir "$TMP/st" && mkfifo "$TMP/st/model.safetensors"
refused "convert a FIFO checkpoint" "$WSPACK" convert "$TMP/st" -o "$TMP/p1"
refused "convert a FIFO file" "$WSPACK" convert "$TMP/st/model.safetensors" -o "$TMP/p2"
mkdir "$TMP/ix" && mkfifo "$TMP/ix/model.safetensors.index.json"
refused "convert a FIFO index" "$WSPACK" convert "$TMP/ix" -o "$TMP/p3"
mkfifo "$TMP/order"
refused "run --order FIFO" "$WSPAGER" run "$TMP/pack" --device host --order "$TMP/order"
refused "simulate --trace FIFO" "$WSPAGER" simulate --trace "$TMP/order" --host-cache 1M \
	--layer-size 1K
# a shard replaced by a FIFO
cp -r "$TMP/pack" "$TMP/pack2" && rm "$TMP/pack2/shard-00000.wsd" &&
	mkfifo "$TMP/pack2/shard-00000.wsd"
refused "run with a FIFO shard" "$WSPAGER" run "$TMP/pack2" --device host
exit 0
