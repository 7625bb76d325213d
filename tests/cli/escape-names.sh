#!/bin/sh
# Text from input files (tensor and layer names, order-file lines) reaches
# the terminal escaped: no control byte, no bidi override, printed raw.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
"$PYTHON3" - "$TMP/evil.safetensors" <<'PY' || fail "writing the checkpoint"
import json, struct, sys
# a layer name with a right-to-left override; safetensors allows it
names = ["head\u202eevil.weight", "model.layers.0.ok.weight"]
hdr = {n: {"dtype": "F32", "shape": [4], "data_offsets": [16 * i, 16 * i + 16]}
       for i, n in enumerate(names)}
h = json.dumps(hdr, ensure_ascii=False).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(32))
PY
"$WSPACK" convert "$TMP/evil.safetensors" -o "$TMP/evil.wsp" >/dev/null 2>&1 || fail "convert"
raw_free() {   # raw_free FILE WHAT: no ESC/control byte and no U+202E in FILE
	if LC_ALL=C grep -q "$(printf '\033')\|$(printf '\342\200\256')" "$1"; then
		od -c "$1" | head >&2
		fail "$2: raw control or bidi bytes printed"
	fi
}
"$WSPACK" info "$TMP/evil.wsp" --layers >"$TMP/info1" 2>&1 || fail "wspack info"
raw_free "$TMP/info1" "wspack info"
grep -qF 'head\xe2\x80\xaeevil' "$TMP/info1" || fail "wspack info: name not shown escaped"
"$WSPAGER" info "$TMP/evil.wsp" >"$TMP/info2" 2>&1 || fail "wspager info"
raw_free "$TMP/info2" "wspager info"
# an order file line with a terminal escape is quoted escaped in the error
printf 'model.layers.0\n\033[2Jbogus\n' >"$TMP/order"
"$WSPAGER" run "$TMP/evil.wsp" --device host --order "$TMP/order" >"$TMP/run" 2>&1 &&
	fail "a bad order line was accepted"
raw_free "$TMP/run" "run --order"
grep -qF '\x1b[2Jbogus' "$TMP/run" || fail "run --order: line not quoted escaped"
# a checkpoint whose name holds a control byte: the parser's error quotes it escaped
"$PYTHON3" - "$TMP/ctl.safetensors" <<'PY' || fail "writing the checkpoint"
import json, struct, sys
h = json.dumps({"a\u001b[31m": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(4))
PY
"$WSPACK" convert "$TMP/ctl.safetensors" -o "$TMP/ctl.wsp" >"$TMP/conv" 2>&1 && fail "control name accepted"
raw_free "$TMP/conv" "convert error"
grep -qF 'a\x1b[31m' "$TMP/conv" || fail "convert error: name not quoted escaped"
exit 0
