#!/bin/sh
# run --devices host,host: one pager over two devices; every layer checks out
# on its device, the pack is read once in two passes, and the report shows
# both devices and six slots.  A bad list is a usage error (exit 2).
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
expect run-devices "$WSPAGER" run "$TMP/pack" --devices host,host --json --passes 2 --host-cache 16M
"$PYTHON3" - "$TMP/run-devices.out" "$TMP/pack" <<'PY' || fail "JSON check"
import json, os, sys
d = json.load(open(sys.argv[1]))
assert d["device"] == "host, host", d["device"]
assert d["config"]["gpu_slots"] == 6, d["config"]
stored = d["model"]["stored_bytes"]
t = d["total"]
assert t["acquires"] == 2 * d["model"]["layers"], t
assert stored <= t["bytes_read"] <= stored + 4096 * d["model"]["layers"], (t, stored)
assert d["passes"][1]["bytes_read"] == 0, d["passes"][1]
PY
expect run-devices-twice "$WSPAGER" run "$TMP/pack" --devices 0,0
expect run-devices-both "$WSPAGER" run "$TMP/pack" --devices host,host --device host
expect run-devices-empty "$WSPAGER" run "$TMP/pack" --devices 0,,1
exit 0
