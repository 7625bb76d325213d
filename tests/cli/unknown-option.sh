#!/bin/sh
# Unknown options and commands are usage errors: exit 2, one line on stderr.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
expect unknown-option "$WSPAGER" run --frobnicate "$TMP/pack"
expect unknown-command "$WSPAGER" frobnicate
expect bad-device "$WSPAGER" verify --device gpu0 "$TMP/pack"
expect missing-arg "$WSPAGER" run
exit 0
