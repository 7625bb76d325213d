"""PyTorch forward through the tools people use today, against wspager.

One run, one checkpoint (a transformers Llama written as safetensors),
`--tokens` tokens through a forward, each method's logits compared with the
resident model's.  Rows: seconds per forward, GB/s of weights (the model's
parameter bytes over that time) and that as a ratio to the pinned
host->GPU bandwidth measured in the same run (pageable too, for reference).

  resident          the whole model in GPU memory (no paging: a floor)
  accelerate-cpu    accelerate.cpu_offload (weights in CPU RAM)
  accelerate-disk   accelerate.disk_offload, page cache dropped before each forward
  pinned-prefetch   hand-written: weights in pinned RAM, a copy stream, two GPU
                    buffers, the next module copied while the current one runs
  wspager-warm      wspager.torch, the model in the host cache
  wspager-cold      wspager.torch, host cache smaller than the model, page
                    cache dropped before each forward (needs root)

  python3 bench/torch_offload.py --dir /var/tmp/wsp-torch [--layers 16 --hidden 4096]
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wspager  # noqa: E402
import wspager.torch as wt  # noqa: E402


def log(*a):
    print(*a, flush=True)


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def llama_config(layers: int, hidden: int, intermediate: int, vocab: int):
    """The benches' Llama: 128-wide heads, 4 query heads a KV head, bf16."""
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden,
                                    intermediate_size=intermediate, num_hidden_layers=layers,
                                    num_attention_heads=max(1, hidden // 128),
                                    num_key_value_heads=max(1, hidden // 512),
                                    max_position_embeddings=4096, torch_dtype="bfloat16")


def model_args(ap, directory: str, tokens: int) -> None:
    """The benches' common options: where they work, the Llama's shape
    (llama_config) and the tokens a forward takes."""
    ap.add_argument("--dir", default=directory)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=tokens)


def make_checkpoint(d: str, cfg, dtype=torch.bfloat16) -> None:
    """Random weights of `dtype` (bf16 by default; std 0.02, norms 1) made on
    the GPU, saved in 2 GB shards with an index, as save_pretrained lays a
    checkpoint out."""
    from safetensors.torch import save_file
    if os.path.exists(os.path.join(d, "config.json")):
        return
    os.makedirs(d, exist_ok=True)
    with wt.init_empty():
        model = transformers.LlamaForCausalLM(cfg)
    g = torch.Generator(device="cuda").manual_seed(0)
    shard, shards, size, wmap = {}, [], 0, {}
    for name, p in model.named_parameters():
        if p.dim() == 1:
            t = torch.ones(p.shape, dtype=dtype)
        else:
            t = (torch.randn(p.shape, generator=g, device="cuda", dtype=torch.float32) * 0.02).to(
                dtype).cpu()
        shard[name] = t
        size += t.numel() * t.element_size()
        if size >= 2 << 30:
            shards.append(shard)
            shard, size = {}, 0
    if shard:
        shards.append(shard)
    total = 0
    for i, s in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(s, os.path.join(d, fn), metadata={"format": "pt"})
        for k, v in s.items():
            wmap[k] = fn
            total += v.numel() * v.element_size()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f)
    cfg.save_pretrained(d)


def h2d_ceiling(nbytes: int = 1 << 30):
    """Median GB/s of 1 GiB host->GPU copies: pinned (async) and pageable."""
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    out = {}
    for kind in ("pinned", "pageable"):
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "pinned"))
        src.fill_(1)
        times = []
        for _ in range(6):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=(kind == "pinned"))
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        out[kind] = nbytes / statistics.median(times[1:]) / 1e9
        del src
    return out


def timed(fn, reps: int, before=None):
    """Median seconds of `reps` calls (after one warm-up), synchronised."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if before:
            before()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


class PinnedPrefetch:
    """What the forums advise: each module's weights in one pinned buffer,
    two GPU buffers, a copy stream; while module i runs, module i+1 is
    copied; events order the copies and the reuse of a buffer."""

    def __init__(self, model, modules):
        self.mods = modules
        self.copy = torch.cuda.Stream()
        self.host, self.layout = [], []
        biggest = 0
        for m in modules:
            ps = list(m.parameters())
            n = sum(p.numel() * p.element_size() for p in ps)
            buf = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            off, lay = 0, []
            for p in ps:
                nb = p.numel() * p.element_size()
                buf[off:off + nb].copy_(p.data.reshape(-1).view(torch.uint8))
                lay.append((p, off, nb, tuple(p.shape)))
                off += nb
            self.host.append(buf)
            self.layout.append(lay)
            biggest = max(biggest, n)
        self.gpu = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]
        self.ready = [torch.cuda.Event() for _ in modules]
        self.free = [torch.cuda.Event() for _ in range(2)]
        for p in model.parameters():
            p.data = torch.empty(0, dtype=p.dtype, device="cuda")
        for i, m in enumerate(modules):
            m.register_forward_pre_hook(lambda mod, args, i=i: self.pre(i))
            m.register_forward_hook(lambda mod, args, out, i=i: self.post(i))

    def start(self, i):
        b = i % 2
        with torch.cuda.stream(self.copy):
            self.copy.wait_event(self.free[b])
            self.gpu[b][:self.host[i].numel()].copy_(self.host[i], non_blocking=True)
            self.ready[i].record(self.copy)

    def begin(self):
        self.start(0)

    def pre(self, i):
        cur = torch.cuda.current_stream()
        cur.wait_event(self.ready[i])
        buf = self.gpu[i % 2]
        for p, off, nb, shape in self.layout[i]:
            p.data = buf[off:off + nb].view(p.dtype).view(shape)
        if i + 1 < len(self.mods):
            self.start(i + 1)

    def post(self, i):
        self.free[i % 2].record(torch.cuda.current_stream())


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, "/var/tmp/wsp-torch", tokens=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm-cache", default="16G")
    ap.add_argument("--cold-cache", default="2G")
    ap.add_argument("--skip", default="", help="comma-separated rows to leave out")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    cfg = llama_config(a.layers, a.hidden, a.intermediate, a.vocab)
    ck = os.path.join(a.dir, "llama")
    t0 = time.time()
    make_checkpoint(ck, cfg)
    log(f"checkpoint {ck}: {time.time() - t0:.1f} s")
    pack = ck + ".wsp"
    if not os.path.exists(os.path.join(pack, "manifest.wspm")):
        t0 = time.time()
        wspager.convert(ck, pack, force=True)
        log(f"converted: {time.time() - t0:.1f} s")
    pk = wspager.Pack(pack)
    weight_bytes = pk.summary["raw_bytes"]
    ratio = pk.summary["raw_bytes"] / pk.summary["stored_bytes"]
    pk.close()
    ceil = h2d_ceiling()
    log(f"weights {weight_bytes / 1e9:.2f} GB (pack ratio {ratio:.3f}); pinned H2D "
        f"{ceil['pinned']:.1f} GB/s, pageable {ceil['pageable']:.1f} GB/s "
        f"({torch.cuda.get_device_name()})")
    ids = torch.randint(0, a.vocab, (1, a.tokens), device="cuda")
    rows, ref = [], None

    def run(name, model, before=None, note=""):
        nonlocal ref
        with torch.no_grad():
            sec, out = timed(lambda: model(ids).logits, a.reps, before)
        if ref is None:
            ref = out.clone()
        exact = torch.equal(out, ref)
        gbps = weight_bytes / sec / 1e9
        rows.append({"method": name, "s_per_forward": sec, "weights_GBps": gbps,
                     "vs_pinned": gbps / ceil["pinned"], "exact": exact, "note": note})
        log(f"{name:16s} {sec:8.3f} s/forward {gbps:7.2f} GB/s {gbps / ceil['pinned']:6.3f} of pinned"
            f"  logits {'identical' if exact else 'DIFFER max %.3g' % (out - ref).abs().max().item()}"
            f" {note}")

    def load_cpu():
        return transformers.AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16).eval()

    m = load_cpu().cuda()
    run("resident", m)
    del m
    gc.collect()
    torch.cuda.empty_cache()
    if "accelerate" not in skip:
        try:
            import accelerate
            m = load_cpu()
            accelerate.cpu_offload(m, execution_device=torch.device("cuda"))
            run("accelerate-cpu", m)
            del m
            gc.collect()
            m = load_cpu()
            off_dir = os.path.join(a.dir, "accelerate-offload")
            accelerate.disk_offload(m, off_dir, execution_device=torch.device("cuda"))
            dropped = drop_caches()
            run("accelerate-disk", m, before=drop_caches if dropped else None,
                note="cold" if dropped else "page cache NOT dropped (not root)")
            del m
            gc.collect()
        except ImportError:
            log("accelerate not installed: its rows are left out")
    if "pinned" not in skip:
        m = load_cpu()
        mods = [m.model.embed_tokens] + list(m.model.layers) + [m.model.norm, m.lm_head]
        m.model.rotary_emb.to("cuda")   # its inv_freq buffer
        pp = PinnedPrefetch(m, mods)
        m.model.register_forward_pre_hook(lambda mod, args: pp.begin())
        run("pinned-prefetch", m)
        del m, pp
        gc.collect()
        torch.cuda.empty_cache()
    m = wt.from_pretrained(ck, device="cuda", host_cache=a.warm_cache, gpu_slots=3)
    with torch.no_grad():
        m(ids)   # the first pass learns the order and fills the host tier
        n = 0    # then the pager chooses who decodes, measuring forwards
        while m._wspager.pager.who_decodes() == "trying" and n < 200:
            m(ids)
            torch.cuda.synchronize()   # as a generating loop waits for each token
            n += 1
    run("wspager-warm", m, note=f"host cache {a.warm_cache}; {m._wspager.pager.who_decodes()} "
        f"decodes (chosen in {n} forwards)")
    st = m._wspager.pager.stats()
    log(f"  stats: {st['acquires']} acquires, {st['gpu_hits']} gpu hits, {st['host_hits']} host hits, "
        f"{st['misses']} misses, read {st['bytes_read'] / 1e9:.2f} GB")
    wt.remove(m)
    del m
    gc.collect()
    m = wt.from_pretrained(ck, device="cuda", host_cache=a.cold_cache, gpu_slots=3)
    dropped = drop_caches()
    run("wspager-cold", m, before=drop_caches if dropped else None,
        note=f"host cache {a.cold_cache}" + ("" if dropped else ", page cache NOT dropped"))
    st = m._wspager.pager.stats()
    log(f"  stats: read {st['bytes_read'] / 1e9:.2f} GB in {st['acquires']} acquires, "
        f"io {st['io_backend']} direct={st['direct_io']}")
    wt.remove(m)
    by = {r["method"]: r for r in rows}
    if "wspager-warm" in by and "accelerate-cpu" in by:
        log(f"wspager-warm / accelerate-cpu: {by['accelerate-cpu']['s_per_forward'] / by['wspager-warm']['s_per_forward']:.1f}x")
    if "wspager-cold" in by and "accelerate-disk" in by:
        log(f"wspager-cold / accelerate-disk: {by['accelerate-disk']['s_per_forward'] / by['wspager-cold']['s_per_forward']:.1f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "weights_bytes": weight_bytes,
                       "pack_ratio": ratio, "ceilings_GBps": ceil, "tokens": a.tokens,
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "rows": rows}, f, indent=1)
    if not all(r["exact"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
