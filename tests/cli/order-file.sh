#!/bin/sh
# run --order FILE: layer names with comments and blank lines; an unknown
# name is an error naming the file and line (exit 1).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
cat >"$TMP/order" <<'ORDER'
# a model that runs its blocks twice, skipping the head
model.embed_tokens

model.layers.0   # first block
model.layers.1
model.layers.0
model.layers.1
ORDER
expect order-ok "$WSPAGER" run "$TMP/pack" --device host --json --passes 1 --order "$TMP/order"
"$PYTHON3" - "$TMP/order-ok.out" <<'PY' || fail "order JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["model"]["layers_per_pass"] == 5, d["model"]
assert d["total"]["acquires"] == 5 and d["total"]["layers"] == 5
PY
printf 'model.layers.0\n# fine\nmodel.layers.77\n' >"$TMP/bad-order"
expect order-bad "$WSPAGER" run "$TMP/pack" --device host --order "$TMP/bad-order"
expect order-missing "$WSPAGER" run "$TMP/pack" --device host --order "$TMP/none"
exit 0
