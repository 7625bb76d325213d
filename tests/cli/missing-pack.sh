#!/bin/sh
# A pack that does not exist: exit 1, one line "wspager: ..." naming it.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
for cmd in info verify run bench; do
	if [ $cmd = info ]; then
		expect missing-pack "$WSPAGER" info "$TMP/nope"
	else
		expect missing-pack "$WSPAGER" $cmd --device host "$TMP/nope"
	fi
	err=$TMP/missing-pack.err
	[ "$(wc -l <"$err")" -le 2 ] || { cat "$err" >&2; fail "$cmd: more than one error line"; }
	grep -q "^wspager: .*$TMP/nope" "$err" || { cat "$err" >&2; fail "$cmd: message does not name the pack"; }
done
exit 0
