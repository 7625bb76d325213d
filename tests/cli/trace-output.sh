#!/bin/sh
# run --trace-json never writes over what the run reads: a file inside the
# pack, the pack itself, the order file; an existing file needs --force, and
# a special file is refused even then.  Each refusal leaves the pack intact.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
make_pack "$TMP/pack"
sum() { cat "$TMP/pack"/* | cksum; }
before=$(sum)
refused() {   # refused WHY ARGS...: exit 2, a message naming the file, pack untouched
	why=$1; shift
	rc=0
	"$WSPAGER" run "$TMP/pack" --device host --passes 1 "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
	[ $rc = 2 ] || { cat "$TMP/err" >&2; fail "$why: exit $rc, want 2"; }
	grep -q "^wspager: --trace-json " "$TMP/err" || { cat "$TMP/err" >&2; fail "$why: no message"; }
	[ "$(sum)" = "$before" ] || fail "$why: the pack changed"
	"$WSPAGER" verify "$TMP/pack" >/dev/null 2>&1 || fail "$why: the pack no longer verifies"
}
refused "manifest" --trace-json "$TMP/pack/manifest.wspm"
refused "manifest, forced" --trace-json "$TMP/pack/manifest.wspm" --force
refused "new file in the pack" --trace-json "$TMP/pack/new.json" --force
refused "the pack itself" --trace-json "$TMP/pack" --force
ln -s "$TMP/pack" "$TMP/link"
refused "through a symlink" --trace-json "$TMP/link/shard-00000.wsd" --force
"$WSPAGER" info "$TMP/pack" --json | "${PYTHON3:-python3}" -c '
import json, sys
for l in json.load(sys.stdin)["layers"]: print(l["name"])' >"$TMP/order" 2>/dev/null ||
	printf '%s\n' model.embed_tokens >"$TMP/order"
refused "the order file" --order "$TMP/order" --trace-json "$TMP/order" --force
echo keep >"$TMP/old.json"
refused "existing file" --trace-json "$TMP/old.json"
[ "$(cat "$TMP/old.json")" = keep ] || fail "existing trace file overwritten without --force"
mkfifo "$TMP/fifo"
refused "a FIFO" --trace-json "$TMP/fifo" --force
# --force replaces an existing regular file
"$WSPAGER" run "$TMP/pack" --device host --passes 1 --trace-json "$TMP/old.json" --force \
	>/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "--force"; }
grep -q traceEvents "$TMP/old.json" || fail "--force did not write the trace"
exit 0
