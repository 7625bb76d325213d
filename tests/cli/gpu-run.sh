#!/bin/sh
# On a GPU (skipped elsewhere): verify checksums every tensor on the device,
# run does the GEMM workload with the documented JSON, bench fills every row,
# and a corrupt pack fails the run naming the tensor.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
rc=0
"$WSPAGER" verify --device 0 "$TMP/pack" >"$TMP/verify.out" 2>"$TMP/verify.err" || rc=$?
if [ $rc != 0 ] && grep -Eq "no usable CUDA device|built without CUDA|no such CUDA device" "$TMP/verify.err"; then
	skip "no GPU: $(head -1 "$TMP/verify.err")"
fi
[ $rc = 0 ] || { cat "$TMP/verify.err" >&2; fail "verify --device 0"; }
grep -q "^$TMP/pack: ok: 39 tensors match their checksums on cuda:0" "$TMP/verify.out" ||
	{ cat "$TMP/verify.out" >&2; fail "verify: device check line"; }

expect gpu-run "$WSPAGER" run "$TMP/pack" --device 0 --json --passes 3 --host-cache 2M \
	--trace-json "$TMP/trace.json"
"$PYTHON3" - "$TMP/gpu-run.out" "$TMP/trace.json" <<'PY' || fail "GPU run JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["device"].startswith("cuda:0"), d["device"]
m = d["model"]
assert d["config"]["pinned_bytes"] > 0, d["config"]
for p in d["passes"]:
    # 4 blocks x 7 projections + embed_tokens + lm_head are GEMMs; the norms are checksummed
    assert p["gemms"] == 30, p["gemms"]
    assert p["checksums"] == m["tensors"] - 30, p["checksums"]
    assert p["weights_bytes"] == m["raw_bytes"]
    assert p["compute_s"] > 0 and p["wait_s"] >= 0 and p["gemm_tflops"] > 0
    assert p["bytes_h2d"] + 0 >= 0
t = d["total"]
assert t["acquires"] == 3 * m["layers"]
tr = json.load(open(sys.argv[2]))
names = {e["name"] for e in tr["traceEvents"] if e["ph"] == "X"}
for stage in ("read", "decode", "h2d", "compute"):
    assert stage in names, (stage, names)
PY

expect gpu-bench "$WSPAGER" bench --device 0 --json "$TMP/pack"
"$PYTHON3" - "$TMP/gpu-bench.out" <<'PY' || fail "GPU bench JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["ceilings"]
assert c["h2d_pinned_gbps"] > 0 and c["h2d_pageable_gbps"] > 0
for r in d["loaders"]:
    assert r["skipped"] is None and r["gbps"] > 0, r
assert d["loaders"][0]["speedup"] == 1.0
PY

"$PYTHON3" - "$TMP/pack/shard-00000.wsd" <<'PY' || fail "flipping a byte"
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200000)
    b = f.read(1)
    f.seek(200000)
    f.write(bytes([b[0] ^ 0x40]))
PY
expect gpu-corrupt "$WSPAGER" run "$TMP/pack" --device 0 --passes 1
grep -q "tensor model\." "$TMP/gpu-corrupt.err" || { cat "$TMP/gpu-corrupt.err" >&2; fail "corrupt: tensor not named"; }
exit 0
