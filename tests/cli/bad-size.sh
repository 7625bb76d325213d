#!/bin/sh
# A size with an unknown suffix is a usage error naming the option: exit 2.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
expect bad-size "$WSPAGER" run "$TMP/pack" --host-cache 12X
expect bad-size-sim "$WSPAGER" simulate --trace "$TMP/t" --host-cache 1M --layer-size -5
exit 0
