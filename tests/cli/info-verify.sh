#!/bin/sh
# info (text and JSON) describes the pack; verify passes on a good pack.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
expect info-text "$WSPAGER" info "$TMP/pack"
grep -q '^layers: *7$' "$TMP/info-text.out" || fail "info: layer count"
grep -q '^largest layer: model.layers.0, ' "$TMP/info-text.out" || fail "info: largest layer"
expect info-json "$WSPAGER" info --json --layers "$TMP/pack"
"$PYTHON3" - "$TMP/info-json.out" <<'PY' || fail "info JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("pack", "format_version", "layers", "tensors", "shards", "sources", "chunks", "raw_bytes",
          "stored_bytes", "ratio", "max_layer_raw_bytes", "largest_layer", "chunk_bytes", "dtypes", "metadata"):
    assert k in d, k
assert d["layers"] == 7 and len(d["layer_list"]) == 7
assert d["raw_bytes"] == sum(l["raw_bytes"] for l in d["layer_list"]) or d["raw_bytes"] <= sum(l["raw_bytes"] for l in d["layer_list"])
assert d["max_layer_raw_bytes"] == max(l["raw_bytes"] for l in d["layer_list"])
assert d["dtypes"]["BF16"]["raw_bytes"] == d["raw_bytes"]
assert d["metadata"]["generator"] == "wspager"
PY
expect verify-good "$WSPAGER" verify --device host --threads 2 "$TMP/pack"
grep -q "^@TMP@/pack: ok: 7 layers, 39 tensors" "$TMP/verify-good.out.norm" || fail "verify output"
exit 0
