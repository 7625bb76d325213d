#!/bin/sh
# The default codec on realistic data (wspack convert without --codec:
# auto, per chunk): fp32 weights upcast from bf16, with and without noise in
# the low bits, stay exprans (decoded by a GPU) with their low halves coded,
# within 3% of `--codec zstd` and twice as small as exprans was with the low
# halves raw (ratio 1.2 at most); Gaussian bf16 weights in the same file
# stay exprans; `wspack info --json` reports the mix; the pack verifies and
# unpacks byte for byte.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need_python
"$PYTHON3" - "$TMP/up.safetensors" <<'PY' || fail "writing the checkpoint"
import json, random, struct, sys
rng = random.Random(7)
n = 256 * 1024
def bf16(x):   # round to nearest even, as torch's .to(bfloat16)
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7fff + ((b >> 16) & 1)) >> 16
gauss = [bf16(rng.gauss(0, 0.02)) for _ in range(n)]
data = {
    "upcast": struct.pack(f"<{n}I", *[h << 16 for h in gauss]),
    "upcast_noisy": struct.pack(f"<{n}I", *[h << 16 | rng.getrandbits(4) for h in gauss]),
    "gauss_bf16": struct.pack(f"<{n}H", *[bf16(rng.gauss(0, 0.02)) for _ in range(n)]),
}
header, off = {}, 0
for k, v in data.items():
    header[k] = {"dtype": "BF16" if k.endswith("bf16") else "F32", "shape": [512, n // 512],
                 "data_offsets": [off, off + len(v)]}
    off += len(v)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(data.values()))
PY
for c in default exprans zstd; do
	opt=""; [ "$c" = default ] || opt="--codec $c"
	"$WSPACK" convert "$TMP/up.safetensors" -o "$TMP/$c.wsp" $opt >/dev/null 2>"$TMP/err" ||
		{ cat "$TMP/err" >&2; fail "convert $c"; }
	"$WSPACK" info "$TMP/$c.wsp" --json >"$TMP/$c.json" || fail "info $c"
done
"$WSPACK" info "$TMP/default.wsp"
"$PYTHON3" - "$TMP" <<'PY' || fail "the default's choices"
import json, sys
t = sys.argv[1]
d, x, z = (json.load(open(f"{t}/{c}.json"))["dtypes"] for c in ("default", "exprans", "zstd"))
print(f"F32 ratio: exprans {x['F32']['ratio']:.3f}, zstd {z['F32']['ratio']:.3f}, "
      f"default {d['F32']['ratio']:.3f}; BF16: exprans {x['BF16']['ratio']:.3f}, "
      f"zstd {z['BF16']['ratio']:.3f}, default {d['BF16']['ratio']:.3f}")
assert set(d["F32"]["codecs"]) == {"exprans"}, d["F32"]["codecs"]
assert d["F32"]["stored_bytes"] == x["F32"]["stored_bytes"]
assert d["F32"]["stored_bytes"] <= 1.03 * z["F32"]["stored_bytes"]
assert d["F32"]["ratio"] > 2.0, d["F32"]["ratio"]
assert set(d["BF16"]["codecs"]) == {"exprans"}, d["BF16"]["codecs"]
assert d["BF16"]["stored_bytes"] == x["BF16"]["stored_bytes"]
assert d["BF16"]["stored_bytes"] <= 1.03 * z["BF16"]["stored_bytes"]
PY
"$WSPACK" verify "$TMP/default.wsp" >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "verify"; }
"$WSPACK" unpack "$TMP/default.wsp" -o "$TMP/back" >/dev/null 2>"$TMP/err" ||
	{ cat "$TMP/err" >&2; fail "unpack"; }
cmp "$TMP/up.safetensors" "$TMP/back/up.safetensors" || fail "unpacked bytes differ"
exit 0
