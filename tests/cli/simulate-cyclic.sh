#!/bin/sh
# simulate on a cyclic trace over twice the cache: LRU hits nothing, PREDICT
# matches BELADY.  Sizes from --layer-size, from "NAME SIZE" lines and from a
# pack; a line without a size is an error naming the line.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
{
	echo "# cyclic: 10 layers, 5 passes"
	for p in 1 2 3 4 5; do
		for i in 0 1 2 3 4 5 6 7 8 9; do echo "blk.$i"; done
		echo
	done
} >"$TMP/cyclic.trace"
expect simulate-cyclic "$WSPAGER" simulate --trace "$TMP/cyclic.trace" --host-cache 5M --layer-size 1M --gpu-slots 3

# the same with sizes in the trace, as JSON
sed 's/^\(blk\.[0-9]\)$/\1 1M/' "$TMP/cyclic.trace" >"$TMP/sized.trace"
expect simulate-json "$WSPAGER" simulate --trace "$TMP/sized.trace" --host-cache 5M --json
"$PYTHON3" - "$TMP/simulate-json.out" <<'PY' || fail "JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
h = d["host"]
assert d["accesses"] == 50 and d["layers"] == 10
assert h["lru"]["hits"] == 0, h["lru"]
assert h["predict"]["hits"] == h["belady"]["hits"] > 0, h
assert h["belady"]["bytes_read"] == h["belady"]["misses"] * (1 << 20)
assert "gpu" not in d
PY

# sizes from a pack: its layers in pack order, cyclically; a cache of half
# the model
make_pack "$TMP/pack"
"$WSPAGER" info --json --layers "$TMP/pack" >"$TMP/info.json" || fail "info"
"$PYTHON3" - "$TMP/info.json" "$TMP/pack.trace" <<'PY' || fail "making the trace"
import json, sys
d = json.load(open(sys.argv[1]))
names = [l["name"] for l in d["layer_list"]]
with open(sys.argv[2], "w") as f:
    for p in range(4):
        f.write("\n".join(names) + "\n")
print(d["raw_bytes"] // 2)
PY
half=$("$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["raw_bytes"] // 2)' "$TMP/info.json")
expect simulate-pack "$WSPAGER" simulate --trace "$TMP/pack.trace" --pack "$TMP/pack" --host-cache "$half" --json
"$PYTHON3" - "$TMP/simulate-pack.out" <<'PY' || fail "pack JSON check"
import json, sys
h = json.load(open(sys.argv[1]))["host"]
assert h["lru"]["hits"] == 0, h["lru"]
assert h["predict"]["hits"] == h["belady"]["hits"] > 0, h
PY

# errors name the line
printf 'a 1M\nb\n' >"$TMP/nosize.trace"
expect simulate-nosize "$WSPAGER" simulate --trace "$TMP/nosize.trace" --host-cache 1M
printf 'model.layers.0\nmodel.layers.99\n' >"$TMP/unknown.trace"
expect simulate-unknown "$WSPAGER" simulate --trace "$TMP/unknown.trace" --pack "$TMP/pack" --host-cache 1M
expect simulate-notrace "$WSPAGER" simulate --host-cache 1M
exit 0
