#!/bin/sh
# run --device host --json prints one JSON object with the fields wspager(1)
# documents, and the counts add up.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
expect run-json "$WSPAGER" run "$TMP/pack" --device host --json --passes 2 --host-cache 2M --io pread
"$PYTHON3" - "$TMP/run-json.out" <<'PY' || fail "JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("version", "pack", "device", "config", "model", "passes", "total"):
    assert k in d, k
assert d["device"] == "host", d["device"]
cfg = d["config"]
for k in ("passes", "batch", "host_cache_bytes", "pinned_bytes", "gpu_slots", "slot_bytes",
          "io_backend", "direct_io", "policy", "lookahead", "threads", "prefetch"):
    assert k in cfg, k
assert cfg["passes"] == 2 and cfg["batch"] == 16 and cfg["policy"] == "predict"
assert cfg["io_backend"] == "pread", cfg["io_backend"]
assert cfg["who_decodes"] == "host", cfg["who_decodes"]   # the host backend decodes on the host
# slots sized by what they hold: the make_pack model's embedding and head
# (1024 x 256) are about the size of its blocks, so one size here
assert cfg["slot_bytes"] <= cfg["slots_total_bytes"] <= cfg["gpu_slots"] * cfg["slot_bytes"], cfg
m = d["model"]
for k in ("layers", "tensors", "shards", "raw_bytes", "stored_bytes", "max_layer_raw_bytes", "layers_per_pass"):
    assert k in m, k
assert len(d["passes"]) == 2
rows = d["passes"] + [d["total"]]
for r in rows:
    for k in ("layers", "wall_s", "weights_bytes", "weights_gbps", "compute_s", "wait_s",
              "acquire_block_s", "acquires", "gpu_hits", "host_hits", "misses", "gpu_hit_rate",
              "host_hit_rate", "predicted", "prefetches", "prefetch_wasted", "host_evictions",
              "gpu_evictions", "bytes_read", "bytes_decoded", "bytes_h2d", "cpu_user_s",
              "cpu_sys_s", "gemms", "gemm_tflops", "checksums"):
        assert k in r, k
    assert 0 <= r["host_hit_rate"] <= 1 and 0 <= r["gpu_hit_rate"] <= 1
for i, p in enumerate(d["passes"]):
    assert p["pass"] == i + 1
    assert p["weights_bytes"] == m["raw_bytes"], (p["weights_bytes"], m["raw_bytes"])
    assert p["layers"] == m["layers"]
    assert p["checksums"] == m["tensors"]  # the host backend checks every tensor
    assert p["gemms"] == 30  # and multiplies the 2-D weights: 4 blocks x 7, embed, head
t = d["total"]
assert "pass" not in t
assert t["weights_bytes"] == 2 * m["raw_bytes"]
assert t["acquires"] == 2 * m["layers"], t["acquires"]
assert t["gpu_hits"] + t["host_hits"] + t["misses"] == t["acquires"]
# the first pass starts cold: everything it uses comes from disk
assert d["passes"][0]["bytes_read"] >= m["stored_bytes"] * 0.99
PY
exit 0
