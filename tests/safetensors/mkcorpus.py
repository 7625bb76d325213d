#!/usr/bin/env python3
"""Writes the hand-made safetensors corpus (tests/fuzz/corpus/safetensors):
at least one bad file per RELIABILITY item 1-11, and a few valid ones.
Run from the source tree; the files are committed, this only regenerates."""
import json, os, struct, sys

out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus/safetensors"
os.makedirs(out, exist_ok=True)


def t(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


def file(name, header, data=b"", raw=False, pad=True, prefix=None):
    h = header if raw else json.dumps(header, separators=(",", ":")).encode()
    if pad and not raw:
        h += b" " * (-len(h) % 8)
    n = struct.pack("<Q", len(h)) if prefix is None else prefix
    with open(os.path.join(out, name), "wb") as f:
        f.write(n + h + data)


# valid files
file("ok-empty", {})
file("ok-metadata-edge", {"__metadata__": {"format": "pt", "n": "caf\u00e9"},
                          "scalar": t("F32", [], 0, 4), "zero": t("F32", [3, 0, 5], 4, 4),
                          "empty": t("I64", [0], 4, 4), "w": t("BF16", [2, 2], 4, 12)},
     bytes(range(12)))
file("ok-unordered-keys", {"b": t("U8", [2], 2, 4), "a": t("U8", [2], 0, 2)}, b"abcd")
file("ok-all-dtypes", {f"t{i}": t(d, [4], 4 * i * 8, 4 * i * 8 + 32)
                       for i, d in enumerate(["F64", "I64", "U64", "C64"])}, bytes(128))
file("ok-subbyte", {"a": t("F4", [4], 0, 2), "b": t("F6_E2M3", [4], 2, 5)}, bytes(5))
# 1: header length
file("01-len-huge", b"{}", raw=True, prefix=b"\xff" * 8)
file("01-len-over-cap", b"{}", raw=True, prefix=struct.pack("<Q", 100 * 2**20 + 1))
file("01-len-past-file", b"{}", raw=True, prefix=struct.pack("<Q", 4096))
file("01-short", b"", raw=True, prefix=b"\x02\x00\x00")
# 2: UTF-8, JSON, object, duplicates
file("02-not-utf8", b'{"caf\xc3":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x", raw=True)
file("02-not-object", b"[1,2,3]", raw=True)
file("02-bad-json", b'{"a":{"dtype":"U8",', raw=True)
file("02-leading-space", b'  {}    ', raw=True)
file("02-dup-keys", b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
     b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy", raw=True)
file("02-metadata-not-strings", {"__metadata__": {"format": 1}})
file("02-nul-in-text", b"{}\x00     ", raw=True)
# 3: offsets
file("03-reversed", {"a": t("U8", [0], 4, 2)}, bytes(4))
file("03-past-end", {"a": t("U8", [8], 0, 8)}, bytes(4))
file("03-overlap", {"a": t("U8", [4], 0, 4), "b": t("U8", [4], 2, 6)}, bytes(6))
file("03-gap", {"a": t("U8", [4], 0, 4), "b": t("U8", [4], 5, 9)}, bytes(9))
file("03-trailing", {"a": t("U8", [4], 0, 4)}, bytes(5))
# 4: overflow
file("04-overflow", {"a": t("F32", [2**32, 2**32], 0, 0)})
file("04-overflow-rank8", {"a": t("U8", [2**8] * 8, 0, 0)})
# 5: range vs size
file("05-size-mismatch", {"a": t("F32", [2, 2], 0, 15)}, bytes(15))
# 6: accepted edge cases are in ok-metadata-edge; zero dims with a bad range
file("06-zero-dim-nonempty", {"a": t("F32", [4, 0], 0, 4)}, bytes(4))
# 7: dtype
file("07-unknown-dtype", {"a": t("F128", [1], 0, 16)}, bytes(16))
file("07-lowercase-dtype", {"a": t("bf16", [1], 0, 2)}, bytes(2))
# 8: names
file("08-empty-name", {"": t("U8", [1], 0, 1)}, b"x")
file("08-nul-name", b'{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x", raw=True)
file("08-long-name", {"x" * 1025: t("U8", [1], 0, 1)}, b"x")
# 9: counts
file("09-rank-9", {"a": t("U8", [1] * 9, 0, 1)}, b"x")
file("ok-many-tensors", {f"t{i}": t("U8", [0], 0, 0) for i in range(5000)})
# 10: wrapping sums
file("10-wrap", {"a": t("U8", [4], 0, 4), "b": t("U8", [0], 2**63 - 1, 2**63 - 1)}, bytes(4))
file("10-negative", {"a": t("U8", [1], -1, 0)}, bytes(1))
# 11: a length prefix written big-endian reads as a huge length
file("11-big-endian-length", b"{}      ", raw=True, prefix=struct.pack(">Q", 8))
