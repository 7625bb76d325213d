#!/bin/sh
# --help lists every subcommand and exits 0; --version names the version.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
expect help "$WSPAGER" --help
for cmd in run bench simulate verify info; do
	grep -q "^  $cmd" "$TMP/help.out" || fail "--help does not list $cmd"
done
expect help-run "$WSPAGER" run --help
expect version "$WSPAGER" --version
grep -q '^wspager [0-9][0-9.]* (library [0-9][0-9.]*)$' "$TMP/version.out" || fail "--version"
expect no-command "$WSPAGER"
exit 0
