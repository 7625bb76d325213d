#!/bin/sh
# wspack convert --order FILE: the layers it names come first in the pack, in
# its order (comments and blank lines as run --order takes them), the rest by
# the built-in rule; a name no layer has is an error naming it (exit 1, no
# pack written); so is a missing file.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
cat >"$TMP/order" <<'ORDER'
# the head first, then the blocks backwards
lm_head
model.layers.3
model.layers.2   # and so on
ORDER
make_pack "$TMP/pack" --order "$TMP/order"
"$WSPACK" info --layers "$TMP/pack" >"$TMP/info" || fail "wspack info"
got=$(awk '$1 ~ /^[0-9]+$/ { print $2 }' "$TMP/info" | tr '\n' ' ')
want="lm_head model.layers.3 model.layers.2 model.embed_tokens model.layers.0 model.layers.1 model.norm "
[ "$got" = "$want" ] || fail "layer order: got '$got', want '$want'"
printf 'model.layers.0\nmodel.layers.9\n' >"$TMP/bad-order"
expect convert-order-bad "$WSPACK" convert "$TMP/model.safetensors" -o "$TMP/bad" --order "$TMP/bad-order"
[ ! -e "$TMP/bad" ] || fail "a failed convert left $TMP/bad"
expect convert-order-missing "$WSPACK" convert "$TMP/model.safetensors" -o "$TMP/bad" --order "$TMP/none"
exit 0
