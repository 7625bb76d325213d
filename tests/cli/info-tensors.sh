#!/bin/sh
# wspack info --tensors lists each layer's tensors (name, dtype, shape), in
# text and in JSON, so that the grouping can be checked without parsing the
# manifest; the layer table and its tensor lists agree with the pack.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
"$WSPACK" info "$TMP/pack" --tensors >"$TMP/text" 2>&1 || fail "info --tensors"
grep -q "^        model.layers.0.mlp.up_proj.weight  BF16 \[512, 256\]$" "$TMP/text" ||
	{ cat "$TMP/text" >&2; fail "no tensor line for model.layers.0.mlp.up_proj.weight"; }
"$WSPACK" info "$TMP/pack" --tensors --json >"$TMP/json" || fail "info --tensors --json"
"$PYTHON3" - "$TMP/json" <<'PY' || fail "JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
layers = d["layer_list"]
assert sum(len(l["tensor_list"]) for l in layers) == d["tensors"]
for l in layers:
    assert len(l["tensor_list"]) == l["tensors"], l["name"]
    for t in l["tensor_list"]:
        assert t["name"].startswith(l["name"] + ".") or t["short_name"] == t["name"], t
        assert t["dtype"] == "BF16" and all(isinstance(x, int) for x in t["shape"]), t
names = [l["name"] for l in layers]
assert names[0] == "model.embed_tokens" and names[-1] == "lm_head", names
PY
# --layers alone lists no tensors
"$WSPACK" info "$TMP/pack" --layers --json | "$PYTHON3" -c '
import json, sys
assert all("tensor_list" not in l for l in json.load(sys.stdin)["layer_list"])' || fail "--layers lists tensors"
exit 0
