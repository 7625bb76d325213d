"""The numpy-level package over the C API: convert with progress and notes,
Pack listings, Pager acquire by index and name, zero-copy read-only views
holding exactly the checkpoint's bytes, stats, errors with codes and
messages, and ctypes structs laid out as the compiler lays out the C ones."""
import ctypes
import errno
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import wspager
from wspager import _lib
from checks import check, finish

T = os.environ["WSP_TEST_TMP"]


def as_stored(t: torch.Tensor) -> torch.Tensor:
    """t as the pager's host views show it: bf16 and fp8 as their bits."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16)
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def raises(fn, code=None, text=None):
    try:
        fn()
    except wspager.WspError as e:
        return (code is None or e.code == code) and (text is None or text in str(e)), e
    except (KeyError, ValueError) as e:
        return code is None and (text is None or text in str(e)), e
    return False, None


# 1. layout: every field of the ctypes mirror where the compiler puts it
layout = json.loads(subprocess.check_output([sys.argv[1]]))
for cname, cls in _lib.STRUCTS.items():
    c = layout[cname]
    check(ctypes.sizeof(cls) == c["size"], f"{cname}: ctypes size {ctypes.sizeof(cls)} != C {c['size']}")
    for name, off, size in c["fields"]:
        f = getattr(cls, name)
        check((f.offset, f.size) == (off, size), f"{cname}.{name}: ctypes ({f.offset}, {f.size}) != C ({off}, {size})")

# 2. a checkpoint written by the reference safetensors package
torch.manual_seed(1)
src = {
    "model.embed_tokens.weight": torch.randn(100, 32, dtype=torch.float16),
    "model.layers.0.mlp.up_proj.weight": torch.randn(64, 32, dtype=torch.bfloat16),
    "model.layers.0.input_layernorm.weight": torch.randn(32),
    "model.layers.1.ids": torch.arange(5, dtype=torch.int64),
    "model.layers.1.scale": torch.tensor(3.5),
    "model.layers.1.q": torch.randn(16).to(torch.float8_e4m3fn),
}
ckpt = os.path.join(T, "ckpt")
os.makedirs(ckpt)
save_file(src, os.path.join(ckpt, "model.safetensors"), metadata={"format": "pt"})
seen, notes = [], []
pack = wspager.convert(ckpt, os.path.join(T, "m.wsp"), chunk_size="64K",
                       progress=lambda d, t: seen.append((d, t)), log=notes.append)
check(seen and seen[-1][0] == seen[-1][1] and seen == sorted(seen), f"progress calls {seen[:3]}...{seen[-1:]}")
check(pack.summary["n_tensors"] == len(src), f"summary {pack.summary}")
names = [L.name for L in pack.layers]
check(names[:3] == ["model.embed_tokens", "model.layers.0", "model.layers.1"], f"layers {names}")
info = {t.name: t for t in pack.tensors()}
check(info["model.layers.0.mlp.up_proj.weight"].dtype == "BF16", "dtype name")
check(info["model.layers.1.scale"].shape == (), "rank-0 shape")
check(json.loads(pack.metadata) == {"format": "pt"}, f"metadata {pack.metadata}")
pack.verify()
# the disk-side ceiling: the shards' stored bytes, read without decoding
nread, secs = pack.measure_read()
stored = sum(L.stored_bytes for L in pack.layers)
check(nread >= stored and secs > 0, f"measure_read {nread} bytes in {secs} s, {stored} stored")
check(pack.measure_read(limit=1)[0] <= max(L.stored_bytes for L in pack.layers), "measure_read limit")
ok, e = raises(lambda: pack.measure_read(limit=-1), None, "out of range")
check(ok and isinstance(e, ValueError), f"negative limit: {e!r}")
# a layer order given at conversion: those layers first, in its order
ordered = wspager.convert(ckpt, os.path.join(T, "ordered.wsp"),
                          order=["model.layers.1", "model.embed_tokens"])
names = [L.name for L in ordered.layers]
check(names == ["model.layers.1", "model.embed_tokens", "model.layers.0"], f"ordered layers {names}")
ok, e = raises(lambda: wspager.convert(ckpt, os.path.join(T, "bad-order.wsp"), order=["nope"]),
               None, 'no layer named "nope"')
check(ok and not os.path.exists(os.path.join(T, "bad-order.wsp")), f"unknown order name: {e}")
# smallest=True: the top mantissa bit coded with the exponent where that is
# smaller; the same weights back (unpack), fewer stored bytes
big = {"model.layers.0.w": torch.randn(512, 256, dtype=torch.bfloat16) * 0.02,
       "model.layers.0.v": torch.randn(512, 256) * 0.02}
bdir = os.path.join(T, "big")
os.makedirs(bdir)
save_file(big, os.path.join(bdir, "model.safetensors"))
plain = wspager.convert(bdir, os.path.join(T, "plain.wsp"))
small = wspager.convert(bdir, os.path.join(T, "small.wsp"), smallest=True)
p_bytes = sum(L.stored_bytes for L in plain.layers)
s_bytes = sum(L.stored_bytes for L in small.layers)
check(s_bytes < p_bytes, f"smallest: {s_bytes} stored bytes, default {p_bytes}")
small.verify()
small.unpack(os.path.join(T, "small-back"))
back = load_file(os.path.join(T, "small-back", "model.safetensors"))
check(all(torch.equal(back[k], v) for k, v in big.items()), "smallest: weights back")

# 3. the pager on the host backend: views hold the checkpoint's bytes
with wspager.Pager(os.path.join(T, "m.wsp"), device="host", host_cache="16M", gpu_slots=2) as pg:
    for L in pack.layers:
        with pg.acquire(L.index) as layer:
            for t in L.tensors:
                a = layer[t.short_name]
                check(a is not None and not a.flags.writeable, f"{t.name}: not read-only")
                want = as_stored(src[t.name])
                check(a.shape == tuple(want.shape), f"{t.name}: shape {a.shape}")
                check(np.array_equal(a, want.numpy()), f"{t.name}: values differ")
                check(layer.dtypes[t.short_name] == t.dtype, f"{t.name}: dtype name")
                try:
                    a[...] = 0
                    check(False, f"{t.name}: a write went through")
                except ValueError:
                    pass
    # again, in the other order: what a layer's tensors are is read once
    # (the pager's table), where they are at each acquire (`addresses`, the
    # views' own); each acquire's dtypes are its own
    for L in reversed(pack.layers):
        with pg.acquire(L.index) as layer:
            check(len(layer.addresses) == len(L.tensors), f"{L.name}: addresses")
            for t, addr in zip(L.tensors, layer.addresses):
                a = layer[t.short_name]
                check(addr == layer.address(t.name) and (a.size == 0 or addr == a.ctypes.data),
                      f"{t.name}: address {addr:#x} is not its view's")
                want = as_stored(src[t.name])
                check(np.array_equal(a, want.numpy()), f"{t.name}: values differ, second round")
            layer.dtypes.clear()   # a caller's change stays in its own acquire
    with pg.acquire(pack.layers[0].index) as layer:
        t = pack.layers[0].tensors[0]
        check(layer.dtypes.get(t.short_name) == t.dtype, "dtypes shared between acquires")
    with pg.acquire("model.layers.0") as layer:
        a = layer["model.layers.0.mlp.up_proj.weight"]   # full name too
        check(layer.index == 1, "acquire by name")
        check(sorted(layer.names()) == ["input_layernorm.weight", "mlp.up_proj.weight"], f"names {layer.names()}")
    ok, e = raises(lambda: layer["mlp.up_proj.weight"], -errno.EINVAL, "released")
    check(ok, f"a released layer's view: {e}")
    # waiting acquires: both slots held, a third times out; the layer held is at hand
    l0, l1 = pg.acquire(0), pg.acquire(1)
    ok, e = raises(lambda: pg.acquire(2, timeout=0.05), -errno.ETIMEDOUT, "every slot stayed held")
    check(ok, f"acquire with a timeout: {e}")
    with pg.acquire(1, timeout=0) as again:
        check(again.index == 1, "acquire_wait of a held layer")
    l0.release()
    l1.release()
    ok, e = raises(lambda: pg.acquire(99), -4104, "no layer 99")
    check(ok, f"bad layer: {e}")
    ok, e = raises(lambda: pg.acquire("nope"), None, "no layer named 'nope'")
    check(ok, f"bad name: {e}")
    st = pg.stats()
    check(st["acquires"] == 2 * len(pack.layers) + 5 and st["acquire_failures"] == 2,
          f"stats {st}")
    check(st["io_backend"] in ("uring", "pread", "mmap"), "io_backend")
    # who decodes (wsp_who_decodes): on the host backend, the host
    check(pg.who_decodes() == "host", f"who decodes on the host backend: {pg.who_decodes()}")
    # the host backend decodes nothing on a device: asked, it says so
    check(pg.provide_device(0, None) is None, "provide_device on the host backend")
    try:   # host memory is refused before the library is asked
        pg.provide_device(0, torch.zeros(16, dtype=torch.uint8))
        check(False, "provide_device took a CPU tensor")
    except ValueError as e:
        check("CUDA tensor" in str(e), f"provide_device of a CPU tensor: {e}")

# 3a. parts of a layer (read_part): they follow each other and cover its
# packed form; read, they hold its chunks (checked), and the readers of
# all the parts together read its stored bytes once
for L in pack.layers:
    whole = pack.read_part(L.index, 0, 1)
    check(whole.offset == 0 and whole.stored_bytes == L.stored_bytes, f"{L.name}: {whole}")
    full = np.zeros(whole.bytes, dtype=np.uint8)
    pack.read_part(L.index, 0, 1, out=full)
    for n in (2, 3):
        at = stored = 0
        for k in range(n):
            p = pack.read_part(L.index, k, n)
            check(p.offset == at and p.stored_offset == stored, f"{L.name} {k}/{n}: {p}")
            buf = torch.empty(p.bytes, dtype=torch.uint8)
            check(pack.read_part(L.index, k, n, out=buf) == p, f"{L.name}: read {k}/{n}")
            check(np.array_equal(buf.numpy(), full[p.offset:p.offset + p.bytes]),
                  f"{L.name}: part {k} of {n} differs from the whole")
            at, stored = at + p.bytes, stored + p.stored_bytes
        check(at == whole.bytes and stored == L.stored_bytes, f"{L.name}: {n} parts")
big = max(pack.layers, key=lambda L: L.stored_bytes)
p = pack.read_part(big.index, 0, 1)
ok, e = raises(lambda: pack.read_part(big.index, 0, 1, out=bytearray(p.bytes - 1)), -errno.EINVAL,
               "do not fit")
check(ok, f"read_part into a small buffer: {e}")
ok, e = raises(lambda: pack.read_part(big.index, 2, 2))
check(ok, f"read_part past the count: {e}")
ok, e = raises(lambda: pack.read_part(big.index, 0, 1 << 32))   # would wrap to 0 parts in C
check(ok, f"read_part of 2**32 parts: {e}")
ok, e = raises(lambda: pack.read_part(big.index, 0, 1, out=bytes(p.bytes)))   # read-only
check(ok, f"read_part into read-only bytes: {e}")

# 4. errors carry the code and the library's message
ok, e = raises(lambda: wspager.Pager(os.path.join(T, "missing.wsp")), -errno.ENOENT, "missing.wsp")
check(ok, f"missing pack: {e}")
ok, e = raises(lambda: wspager.convert(ckpt, ckpt, force=True), -errno.EINVAL, "is the input")
check(ok, f"convert onto its input: {e}")
try:
    wspager.convert(ckpt, os.path.join(T, "lz4.wsp"), codec="lz4")
    check(False, "convert accepted codec='lz4'")
except ValueError as err:
    check("exprans" in str(err), f"unclear codec error: {err}")
check(raises(lambda: wspager.parse_size("12Q"))[0], "parse_size('12Q')")
check(wspager.parse_size("1.5K") == 1536, "parse_size('1.5K')")
ok, e = raises(lambda: wspager.Pager(os.path.join(T, "m.wsp"), device="gpu"), None, "device must be")
check(ok, f"bad device: {e}")
ok, e = raises(lambda: wspager.Pager(os.path.join(T, "m.wsp"), device="host", host_decode="gpu"),
               None, "host_decode")
check(ok and isinstance(e, ValueError), f"host_decode='gpu': {e!r}")
for hd in (True, False):   # forced either way: on the host backend, still the host
    with wspager.Pager(os.path.join(T, "m.wsp"), device="host", host_decode=hd) as pg:
        check(pg.who_decodes() == "host", f"host_decode={hd}: {pg.who_decodes()}")
# gradients and updates: a list that does not match the layer's tensors, a
# layer that does not exist, a save onto the open pack
with wspager.Pager(os.path.join(T, "m.wsp"), device="host", host_cache="16M", gpu_slots=2) as pg:
    n = len(pg.pack.layers[1].tensors)
    ok, e = raises(lambda: pg.grad_push(1, [None] * (n + 1)), None, f"has {n} tensors")
    check(ok, f"grad_push with too many gradients: {e}")
    ok, e = raises(lambda: pg.grad_push_rows(1, "no.such.weight", 0, 0, 0), None, "no tensor")
    check(ok, f"grad_push_rows of an unknown tensor: {e}")
    ok, e = raises(lambda: pg.grad_push_rows(1, n, 0, 0, 0), -4104, "no tensor")   # WSP_ENOTFOUND
    check(ok, f"grad_push_rows of a tensor past the end: {e}")
    ok, e = raises(lambda: pg.grad_push_rows(1, 0, 0, 3, 0), -errno.EINVAL, "NULL")
    check(ok, f"grad_push_rows of 3 rows at NULL: {e}")
    ok, e = raises(lambda: pg.update(1, [None] * (n - 1)), None, f"has {n} tensors")
    check(ok, f"update with too few values: {e}")
    ok, e = raises(lambda: pg.grads(len(pg.pack.layers)), None, None)
    check(ok, f"grads of a layer past the end: {e}")
    ok, e = raises(lambda: pg.save(os.path.join(T, "m.wsp"), force=True), -errno.EINVAL, None)
    check(ok, f"save onto the open pack: {e}")

# grads(): a tensor's first gradient shows in the next call (the views of
# the last call are handed out again only while no accumulator moved or
# appeared), and views of the same accumulator are the same array
with wspager.Pager(os.path.join(T, "m.wsp"), device="host", host_cache="16M") as pg:
    L = pg.pack.layer("model.layers.0")
    names = [t.name for t in L.tensors]
    ln = names.index("model.layers.0.input_layernorm.weight")      # fp32, 32
    up = names.index("model.layers.0.mlp.up_proj.weight")          # bf16, 64 x 32
    for at, grad in ((ln, torch.full((32,), 0.5)),
                     (up, torch.full((64, 32), 2.0, dtype=torch.bfloat16))):
        ptrs = [None] * len(names)
        ptrs[at] = grad.data_ptr()
        pg.grad_push(L.index, ptrs)
        pg.grad_wait(L.index)
        if at == ln:
            first, pushes = pg.grads(L.index)
            again, _ = pg.grads(L.index)
            check(first[names[up]] is None and pushes == 1 and again[names[ln]] is first[names[ln]]
                  and bool((first[names[ln]] == 0.5).all()), "grads() after one tensor's push")
    acc, pushes = pg.grads(L.index)
    check(acc[names[up]] is not None and bool((acc[names[up]] == 2.0).all()) and pushes == 2
          and acc[names[ln]] is first[names[ln]], "grads() after a second tensor's first push")

# 4a. update_f32: fp32 values narrowed by the pager as torch narrows them
# (random values, and ties of round to nearest even); an F16 tensor refused.
# (A new pager: section 4b's reads the pack's own bytes.)
m = os.path.join(T, "m.wsp")
with wspager.Pager(m, device="host", host_cache="16M") as pg:
    L = pg.pack.layer("model.layers.0")
    g = torch.Generator().manual_seed(5)
    vals = {t.short_name: torch.randn(*t.shape, generator=g) for t in L.tensors}
    up = vals["mlp.up_proj.weight"].view(-1)
    up[::3] = (up[::3].view(torch.int32) & ~0xffff | 0x8000).view(torch.float32)   # ties
    pg.update_f32(L.index, [vals[t.short_name].data_ptr() for t in L.tensors])
    with pg.acquire(L.index) as layer:
        got = torch.from_numpy(np.array(layer["mlp.up_proj.weight"]))
        want = vals["mlp.up_proj.weight"].to(torch.bfloat16).view(torch.int16)
        check(torch.equal(got.view(torch.int16), want), "update_f32: bf16 not as torch rounds")
        check(np.array_equal(layer["input_layernorm.weight"], vals["input_layernorm.weight"].numpy()),
              "update_f32: an F32 tensor not copied as given")
    E = pg.pack.layer("model.embed_tokens")
    f = torch.zeros(E.tensors[0].shape)
    ok, e = raises(lambda: pg.update_f32(E.index, [f.data_ptr()]), -errno.EINVAL, "F16")
    check(ok, f"update_f32 of an F16 tensor: {e}")

# 4b. one pager over several devices (two host-backend ones): consecutive
# layers on each, or as layer_devices says; every acquire intact; the
# library's own refusals (training needs one device) reach Python
with wspager.Pager(m, device=["host", "host"], host_cache="16M", gpu_slots=2) as pg:
    where = [pg.layer_device(i) for i in range(len(pg.pack.layers))]
    check(all(d == -1 for d, _ in where) and [k for _, k in where] == sorted(k for _, k in where)
          and where[0][1] == 0 and where[-1][1] == 1, f"layer_device, consecutive: {where}")
    for L in pack.layers:
        with pg.acquire(L.index) as layer:
            for t in L.tensors:
                want = as_stored(src[t.name])
                check(np.array_equal(layer[t.short_name], want.numpy()),
                      f"several devices: {t.name} differs")
    check(pg.stats()["gpu_slots"] == 4, f"slots over two devices: {pg.stats()['gpu_slots']}")
    ok, e = raises(lambda: pg.update(1, [None] * len(pg.pack.layers[1].tensors)), -4106, "one device")
    check(ok, f"update over several devices: {e}")
alt = [i % 2 for i in range(len(wspager.Pack(m).layers))]
with wspager.Pager(m, device=["host", "host"], host_cache="16M", layer_devices=alt) as pg:
    check([pg.layer_device(i)[1] for i in range(len(alt))] == alt, "layer_devices as given")
ok, e = raises(lambda: wspager.Pager(m, device=["host", "host"], layer_devices=[0]), None,
               "layer_devices: 1 entries")
check(ok, f"layer_devices of the wrong length: {e}")
ok, e = raises(lambda: wspager.Pager(m, device=["host", "host"], layer_devices=alt[:-1] + [5]),
               -errno.EINVAL, "2 devices")
check(ok, f"layer_devices out of range: {e}")

# 5. the loader says where it looked, in order
order = _lib._candidates()
check(order[0] == os.environ["WSPAGER_LIBRARY"], f"WSPAGER_LIBRARY first: {order}")
saved = _lib._candidates
_lib._candidates = lambda: [os.path.join(T, "nope.so"), "libwspager-absent.so.9"]
try:
    _lib.load()
    check(False, "loading from bogus paths succeeded")
except OSError as e:
    check("nope.so" in str(e) and "libwspager-absent.so.9" in str(e) and "WSPAGER_LIBRARY" in str(e),
          f"loader message: {e}")
_lib._candidates = saved

finish()
