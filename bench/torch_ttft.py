"""Time to first token, cold: from the load call to the first generated
token, on the Llama of torch_offload.py, beside transformers' own load to
the GPU and Accelerate's CPU offload, against the time to read the pack's
stored bytes from disk (wspager.Pack.measure_read: the pager's own I/O
engine, no decode) measured in the same run: cold, right before and right
after each row, the mean of the two (the disk's rate moves between reads).

Each row runs in a process of its own with the page cache dropped before it
(needs root; said when not), after a warm-up that every loader would pay
alike (the CUDA context, transformers' lazily imported modules: a tiny
model's load and generate) and before the clock starts.  Per row: seconds to load, seconds from there to
the first token (greedy `generate`, one new token), their sum against the
disk read, the token itself (all rows must agree), and the process's peak
RSS beyond what it held after importing torch and transformers; for
wspager also beyond its host tier (the pager's `host_cache_bytes` and
`pinned_bytes` at the end, the larger).

  wspager        wt.from_pretrained(PACK, config=CHECKPOINT, device="cuda")
  transformers   AutoModelForCausalLM.from_pretrained(CHECKPOINT, device_map="cuda")
  accelerate     the same on the CPU, then accelerate.cpu_offload

  python3 bench/torch_ttft.py --dir /var/tmp/wsp-torch [--layers 16 --hidden 4096]
                              [--timeline]

--timeline also prints, for the wspager row, when each phase of the load
began and ended and what had been read from disk by then, and the read
rate through the load and the first token against the disk's
(bench/ttft_timeline.py).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_offload import drop_caches, llama_config, log, make_checkpoint, model_args  # noqa: E402
from ttft_timeline import proc_field  # noqa: E402

import wspager  # noqa: E402  (torch_offload put python/ on the path)
import wspager.torch as wt  # noqa: E402

ROWS = ("wspager", "transformers", "accelerate")


def rss_kib() -> int:
    return proc_field("/proc/self/status", "VmRSS")


def first_token(model, ids):
    """Greedy: the one new token, synchronised."""
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=1, do_sample=False)
    torch.cuda.synchronize()
    return int(out[0, -1])


def warm_up(name: str) -> None:
    """What every row would pay alike, paid before the clock starts: the
    CUDA context, and the modules transformers imports lazily on a first
    load and generate (cold, as the page cache was dropped, they take
    seconds)."""
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1)
    tiny = transformers.AutoModelForCausalLM.from_config(cfg).to("cuda").eval()
    first_token(tiny, torch.zeros(1, 4, dtype=torch.long, device="cuda"))
    if name == "accelerate":
        __import__("accelerate")


def one_row(name: str, ck: str, pack: str, host_cache: str, ids, timeline=False) -> dict:
    """Load and generate in this process; the page cache was dropped by the
    parent just before it started."""
    warm_up(name)
    base = rss_kib()
    extra = {}
    tl = None
    if timeline and name == "wspager":
        from ttft_timeline import Timeline
        tl = Timeline()
        tl.install()
        tl.start()
    t0 = time.perf_counter()
    if name == "wspager":
        model = wt.from_pretrained(pack, config=ck, device="cuda", host_cache=host_cache)
    elif name == "transformers":
        model = transformers.AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16,
                                                                  device_map="cuda")
    else:
        import accelerate
        model = transformers.AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16)
        accelerate.cpu_offload(model, execution_device=torch.device("cuda"))
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    if tl:
        tl.mark("load end")
    token = first_token(model, ids.cuda())
    t2 = time.perf_counter()
    if tl:
        tl.mark("first token")
        extra["timeline"] = tl.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if name == "wspager":
        st = model._wspager.pager.stats()
        tier = max(st["host_cache_bytes"], st["pinned_bytes"])
        extra.update(bytes_read=st["bytes_read"], host_tier_bytes=tier,
                     beyond_tier_GiB=(peak - base) / 2**20 - tier / 2**30,
                     pager={k: st[k] for k in ("misses", "host_hits", "prefetches",
                                               "prefetch_wasted", "host_evictions",
                                               "readahead_left_out")})
    return {"row": name, "load_s": t1 - t0, "first_token_s": t2 - t1, "total_s": t2 - t0,
            "token": token, "peak_beyond_imports_GiB": (peak - base) / 2**20, **extra}


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, "/var/tmp/wsp-torch", tokens=16)
    ap.add_argument("--host-cache", default="12G")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--row", default=None, help=argparse.SUPPRESS)   # a child's one row
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeline", action="store_true")
    a = ap.parse_args()
    ck = os.path.join(a.dir, "llama")
    pack = ck + ".wsp"
    torch.manual_seed(0)
    ids = torch.randint(0, a.vocab, (1, a.tokens))
    if a.row:
        print("RESULT " + json.dumps(one_row(a.row, ck, pack, a.host_cache, ids, a.timeline)),
              flush=True)
        return
    make_checkpoint(ck, llama_config(a.layers, a.hidden, a.intermediate, a.vocab))
    if not os.path.exists(os.path.join(pack, "manifest.wspm")):
        wspager.convert(ck, pack, force=True)
    pk = wspager.Pack(pack)
    raw, stored = pk.summary["raw_bytes"], pk.summary["stored_bytes"]
    dropped = drop_caches()
    nread, disk_s = pk.measure_read()
    pk.close()
    first_disk_s = disk_s
    log(f"{torch.cuda.get_device_name()}; weights {raw / 1e9:.2f} GB, pack {stored / 1e9:.2f} GB; "
        f"disk read of the pack{' (cold)' if dropped else ' (page cache NOT dropped: not root)'}: "
        f"{nread / 1e9:.2f} GB in {disk_s:.2f} s = {nread / disk_s / 1e9:.2f} GB/s")
    rows = []
    for name in filter(None, a.rows.split(",")):
        drop_caches()
        cmd = [sys.executable, os.path.abspath(__file__), "--row", name, "--dir", a.dir,
               "--host-cache", a.host_cache, "--layers", str(a.layers), "--hidden", str(a.hidden),
               "--intermediate", str(a.intermediate), "--vocab", str(a.vocab),
               "--tokens", str(a.tokens)] + (["--timeline"] if a.timeline else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not res:
            log(f"{name}: failed (exit {p.returncode})\n{p.stderr[-3000:]}")
            rows.append({"row": name, "failed": True})
            continue
        r = json.loads(res[-1][len("RESULT "):])
        # this virtual disk's rate moves by up to 30% between reads: the
        # pack read again right after the row, the ceiling the mean of the
        # reads around it (each row's own read before it is the last's after)
        drop_caches()
        with wspager.Pack(pack) as pk:
            _, after_s = pk.measure_read()
        r["disk_read_s"] = (disk_s + after_s) / 2
        r["disk_read_around_s"] = [disk_s, after_s]
        r["vs_disk"] = r["total_s"] / r["disk_read_s"]
        disk_s = after_s
        rows.append(r)
        beyond = (f", {r['beyond_tier_GiB']:.2f} GiB beyond its host tier of "
                  f"{r['host_tier_bytes'] / 2**30:.2f} GiB" if "beyond_tier_GiB" in r else "")
        log(f"{name:13s} load {r['load_s']:6.2f} s + first token {r['first_token_s']:5.2f} s = "
            f"{r['total_s']:6.2f} s = {r['vs_disk']:.2f}x the disk read (read before / after "
            f"it: {r['disk_read_around_s'][0]:.2f} / {r['disk_read_around_s'][1]:.2f} s); "
            f"token {r['token']}; "
            f"peak RSS +{r['peak_beyond_imports_GiB']:.2f} GiB{beyond}")
        if "pager" in r:
            log(f"  read {r['bytes_read'] / stored:.3f}x the pack's stored bytes; "
                + ", ".join(f"{k} {v}" for k, v in r["pager"].items()))
        if "timeline" in r:
            from ttft_timeline import report
            report(r.pop("timeline"), nread / r["disk_read_s"] / 1e9, log)
    tokens = {r["token"] for r in rows if not r.get("failed")}
    log("first tokens agree" if len(tokens) == 1 else f"first tokens DIFFER: {tokens}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "weights_bytes": raw,
                       "pack_stored_bytes": stored, "disk_read_s": first_disk_s, "cold": dropped,
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "rows": rows}, f, indent=1)
    if len(tokens) != 1 or any(r.get("failed") for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
