#!/bin/sh
# run --trace-json writes Chrome trace-event JSON (what Perfetto opens) with
# complete events for disk reads, decode, H2D copies and compute.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
make_pack "$TMP/pack"
expect run-trace "$WSPAGER" run "$TMP/pack" --device host --passes 2 --host-cache 2M --trace-json "$TMP/trace.json"
[ -s "$TMP/trace.json" ] || fail "no trace written"
ls "$TMP" | grep -q 'trace.json.tmp' && fail "temporary trace file left behind"
"$PYTHON3" - "$TMP/trace.json" <<'PY' || fail "trace check"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert isinstance(ev, list) and ev
x = [e for e in ev if e["ph"] == "X"]
for e in x:
    for k in ("name", "ph", "ts", "dur", "pid", "tid"):
        assert k in e, (k, e)
    assert e["ts"] >= 0 and e["dur"] >= 0
names = {e["name"] for e in x}
for stage in ("read", "decode", "h2d", "compute"):
    assert stage in names, (stage, names)
# compute: one event per layer per pass, on its own row
comp = [e for e in x if e["name"] == "compute"]
assert len({e["tid"] for e in comp}) == 1
rows = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
for e in x:
    assert e["tid"] in rows, e
PY
# and the same with the missing-directory case: a clear error, exit 1
expect run-trace-bad "$WSPAGER" run "$TMP/pack" --device host --passes 1 --trace-json "$TMP/no/such/dir/t.json"
grep -q "^wspager: .*$TMP/no/such/dir" "$TMP/run-trace-bad.err" || fail "trace error does not name the file"
exit 0
