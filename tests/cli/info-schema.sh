#!/bin/sh
# wspack info and wspager info print one layout: the same text and the
# same JSON object for the same pack, with and without --layers, and the
# JSON has the keys that wspack(1) documents under INFO JSON.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
for flags in "" "--layers"; do
	"$WSPACK" info "$TMP/pack" --json $flags >"$TMP/a.json" || fail "wspack info --json $flags"
	"$WSPAGER" info "$TMP/pack" --json $flags >"$TMP/b.json" || fail "wspager info --json $flags"
	cmp "$TMP/a.json" "$TMP/b.json" || { diff "$TMP/a.json" "$TMP/b.json" >&2; fail "they differ ($flags)"; }
	"$WSPACK" info "$TMP/pack" $flags >"$TMP/a.txt" || fail "wspack info $flags"
	"$WSPAGER" info "$TMP/pack" $flags >"$TMP/b.txt" || fail "wspager info $flags"
	cmp "$TMP/a.txt" "$TMP/b.txt" || { diff "$TMP/a.txt" "$TMP/b.txt" >&2; fail "text differs ($flags)"; }
	grep -q '^largest layer: ' "$TMP/a.txt" || fail "no largest layer line ($flags)"
done
"$PYTHON3" - "$TMP/a.json" <<'PY' || fail "schema check"
import json, sys
d = json.load(open(sys.argv[1]))
want = {"pack", "format_version", "layers", "tensors", "shards", "sources", "chunks", "chunk_bytes",
        "raw_bytes", "stored_bytes", "ratio", "max_layer_raw_bytes", "largest_layer", "dtypes",
        "metadata", "layer_list"}
assert set(d) == want, set(d) ^ want
bf = d["dtypes"]["BF16"]
assert set(bf) == {"tensors", "raw_bytes", "stored_bytes", "ratio", "codecs"}
assert bf["codecs"] and set(bf["codecs"]) <= {"exprans", "zstd", "raw"}, bf["codecs"]
for c in bf["codecs"].values():
    assert set(c) == {"chunks", "raw_bytes", "stored_bytes", "ratio"}
assert sum(c["stored_bytes"] for c in bf["codecs"].values()) == bf["stored_bytes"]
assert sum(c["raw_bytes"] for c in bf["codecs"].values()) == bf["raw_bytes"]
assert set(d["layer_list"][0]) == {"index", "name", "tensors", "raw_bytes", "stored_bytes"}
assert d["max_layer_raw_bytes"] == max(l["raw_bytes"] for l in d["layer_list"])
assert d["dtypes"]["BF16"]["tensors"] == d["tensors"]
PY
exit 0
