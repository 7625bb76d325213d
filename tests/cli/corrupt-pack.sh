#!/bin/sh
# One flipped byte in a shard: verify and run fail (exit 1) naming the
# shard, the layer and the tensor.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
expect verify-ok "$WSPAGER" verify --device host "$TMP/pack"
"$PYTHON3" - "$TMP/pack/shard-00000.wsd" <<'PY' || fail "flipping a byte"
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200000)
    b = f.read(1)
    f.seek(200000)
    f.write(bytes([b[0] ^ 0x40]))
PY
for cmd in verify run; do
	expect corrupt-pack "$WSPAGER" $cmd --device host "$TMP/pack"
	err=$TMP/corrupt-pack.err
	grep -q "^wspager: .*shard-00000\.wsd" "$err" || { cat "$err" >&2; fail "$cmd: shard not named"; }
	grep -Eq "layer [^,]*model\." "$err" || { cat "$err" >&2; fail "$cmd: layer not named"; }
	grep -q "tensor model\.[^ ]*" "$err" || { cat "$err" >&2; fail "$cmd: tensor not named"; }
done
exit 0
