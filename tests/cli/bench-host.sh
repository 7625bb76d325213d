#!/bin/sh
# bench --device host: the disk and decode ceilings are measured, the GPU
# rows say they were skipped; --json parses.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
expect bench-host "$WSPAGER" bench --device host --json "$TMP/pack"
"$PYTHON3" - "$TMP/bench-host.out" <<'PY' || fail "bench JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["ceilings"]
assert c["h2d_pinned_gbps"] is None and c["h2d_pageable_gbps"] is None
assert c["disk_gbps"] > 0 and c["decode_gbps"] > 0 and c["disk_side_gbps"] > 0
assert abs(c["disk_x_ratio_gbps"] - c["disk_gbps"] * d["model"]["ratio"]) < 1e-6 * c["disk_x_ratio_gbps"]
assert c["page_cache_dropped"] is False   # the tests never drop caches
assert c["decode_from_memory"] is True
names = [r["name"] for r in d["loaders"]]
assert names == ["naive_pageable", "naive_pinned", "pager_cold", "pager_warm"], names
for r in d["loaders"]:
    assert r["skipped"] == "skipped (no GPU)" and r["gbps"] is None, r
PY
expect bench-text "$WSPAGER" bench --device host "$TMP/pack"
[ "$(grep -c 'skipped (no GPU)' "$TMP/bench-text.out")" = 5 ] || fail "bench text: skipped rows"
exit 0
