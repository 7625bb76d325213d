#!/usr/bin/env python3
"""Interoperability with the reference safetensors package.

  interop.py write DIR     checkpoints written by the reference package (every
                           dtype numpy has, with __metadata__; a sharded one
                           with an index as transformers writes it), plus one
                           with BF16/F8 tensors written by hand and checked
                           to load with the reference reader
  interop.py same A B      the reference reader sees the same names, dtypes,
                           shapes, bytes and metadata in files A and B
  interop.py check FILE    the reference reader loads FILE (e.g. generated)
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import save_file

META = {"format": "np", "note": "interop caf\u00e9", "empty": ""}


def arrays(seed):
    rng = np.random.default_rng(seed)
    out = {
        "f64": rng.standard_normal((3, 5)),
        "f32": rng.standard_normal((7,)).astype(np.float32),
        "f16": rng.standard_normal((2, 3, 4)).astype(np.float16),
        "i64": rng.integers(-2**62, 2**62, (4,), dtype=np.int64),
        "i32": rng.integers(-2**31, 2**31, (2, 2), dtype=np.int32),
        "i16": rng.integers(-2**15, 2**15, (5,), dtype=np.int16),
        "i8": rng.integers(-128, 128, (9,), dtype=np.int8),
        "u8": rng.integers(0, 256, (3, 3), dtype=np.uint8),
        "u16": rng.integers(0, 2**16, (6,), dtype=np.uint16),
        "u32": rng.integers(0, 2**32, (6,), dtype=np.uint32),
        "u64": rng.integers(0, 2**63, (2,), dtype=np.uint64),
        "bool": rng.integers(0, 2, (11,)).astype(np.bool_),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "model.layers.1.mlp.up_proj.weight": rng.standard_normal((16, 8)).astype(np.float32),
    }
    return out


def hand_made(path):
    """BF16 and F8 tensors: numpy has no such dtypes, so write the file by
    hand the way the reference does (header padded to 8 with spaces)."""
    rng = np.random.default_rng(7)
    specs = [("w.bf16", "BF16", [4, 4], 2), ("w.f8e4m3", "F8_E4M3", [8], 1),
             ("w.f8e5m2", "F8_E5M2", [2, 3], 1), ("w.u8", "U8", [3], 1)]
    header, blobs, off = {"__metadata__": {"format": "pt", "source": "hand"}}, [], 0
    for name, dt, shape, size in specs:
        n = int(np.prod(shape)) * size
        blobs.append(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    load(path)   # the reference reader must accept it


def write(d):
    os.makedirs(os.path.join(d, "sharded"))
    save_file(arrays(1), os.path.join(d, "all-dtypes.safetensors"), metadata=META)
    hand_made(os.path.join(d, "bf16-f8.safetensors"))
    # Sharded like transformers: numbered shards and an index.
    a = arrays(2)
    names = sorted(a)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    wmap, total = {}, 0
    for i, part in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        save_file({k: a[k] for k in part}, os.path.join(d, "sharded", fn), metadata={"format": "pt"})
        for k in part:
            wmap[k] = fn
            total += a[k].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": wmap}
    with open(os.path.join(d, "sharded", "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    # Zero-size tensors: the reference writer puts them (wider dtypes first)
    # at offsets that tensors of other layers start at too.
    save_file({"model.layers.0.w": np.ones((4, 4), np.float16),
               "model.layers.1.empty": np.zeros((0,), np.float32),
               "model.layers.1.none": np.zeros((3, 0), np.float64),
               "model.layers.2.also": np.zeros((0, 5), np.float32),
               "model.layers.2.w": np.arange(6, dtype=np.float16)},
              os.path.join(d, "empty-shared.safetensors"))


def load(path):
    with open(path, "rb") as f:
        tensors = {name: (v["dtype"], list(v["shape"]), bytes(v["data"]))
                   for name, v in deserialize(f.read())}
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        keys = list(f.keys())
    if sorted(keys) != sorted(tensors):
        raise SystemExit("%s: safe_open and deserialize disagree" % path)
    return tensors, meta


def same(a, b):
    ta, ma = load(a)
    tb, mb = load(b)
    if ma != mb:
        raise SystemExit("metadata differs: %r vs %r" % (ma, mb))
    if sorted(ta) != sorted(tb):
        raise SystemExit("names differ: %s vs %s" % (sorted(ta), sorted(tb)))
    for k in ta:
        if ta[k] != tb[k]:
            raise SystemExit("tensor %s differs: %s %s vs %s %s" % (k, ta[k][0], ta[k][1], tb[k][0], tb[k][1]))
    print("same: %s (%d tensors, metadata %s)" % (os.path.basename(a), len(ta), ma))


def check(path):
    t, meta = load(path)
    if meta != {"format": "pt", "generator": "wspager"}:
        raise SystemExit("%s: unexpected metadata %r" % (path, meta))
    emb = t["model.embed_tokens.weight"]
    if emb[0] != "BF16" or len(emb[1]) != 2:
        raise SystemExit("%s: embed_tokens is %s %s" % (path, emb[0], emb[1]))
    bits = np.frombuffer(emb[2], dtype=np.uint16).astype(np.uint32) << 16
    vals = bits.view(np.float32)
    if not (0.015 < vals.std() < 0.025 and abs(vals.mean()) < 0.005):
        raise SystemExit("%s: embed_tokens mean %g std %g" % (path, vals.mean(), vals.std()))
    print("reference reads %s: %d tensors, std %.4f" % (os.path.basename(path), len(t), vals.std()))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2])
    elif cmd == "same":
        same(sys.argv[2], sys.argv[3])
    elif cmd == "check":
        check(sys.argv[2])
    else:
        raise SystemExit("unknown command " + cmd)
