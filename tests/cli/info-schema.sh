#!/bin/sh
# wspack info --json and wspager info --json print one schema: the same
# object for the same pack, with and without --layers, and the keys that
# wspack(1) documents under INFO JSON.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
for flags in "" "--layers"; do
	"$WSPACK" info "$TMP/pack" --json $flags >"$TMP/a.json" || fail "wspack info --json $flags"
	"$WSPAGER" info "$TMP/pack" --json $flags >"$TMP/b.json" || fail "wspager info --json $flags"
	cmp "$TMP/a.json" "$TMP/b.json" || { diff "$TMP/a.json" "$TMP/b.json" >&2; fail "they differ ($flags)"; }
done
"$PYTHON3" - "$TMP/a.json" <<'PY' || fail "schema check"
import json, sys
d = json.load(open(sys.argv[1]))
want = {"pack", "format_version", "layers", "tensors", "shards", "sources", "chunks", "chunk_bytes",
        "raw_bytes", "stored_bytes", "ratio", "max_layer_raw_bytes", "largest_layer", "dtypes",
        "metadata", "layer_list"}
assert set(d) == want, set(d) ^ want
assert set(d["dtypes"]["BF16"]) == {"tensors", "raw_bytes", "stored_bytes", "ratio"}
assert set(d["layer_list"][0]) == {"index", "name", "tensors", "raw_bytes", "stored_bytes"}
assert d["max_layer_raw_bytes"] == max(l["raw_bytes"] for l in d["layer_list"])
assert d["dtypes"]["BF16"]["tensors"] == d["tensors"]
PY
exit 0
