"""A model over two GPUs against one, in one run: wspager.torch with
device=["cuda:0", "cuda:1"] (each GPU's pager feeds it over its own link)
against device="cuda:0", the model in the host tier (warm), forwards of a
few tokens back to back so that streaming the weights bounds them.  The
ceilings measured in the same run: pinned host->GPU copies to each GPU
alone and to both at once, and GPU->GPU copies.  Rows: GB/s of raw weights
through the forward (passes x the model's bytes / time), its ratio to the
one-GPU row and to the links, and what crossed the links a forward (the
pagers' bytes_h2d:
the whole packed model each forward shows the weights were streamed, not
kept on the GPU) with the acquires that found their layer prefetched;
logits of the two compared.  Measured after the host tier is pinned and warm.

  python3 bench/torch_devices.py --dir /var/tmp/wsp-devices [--layers 16 --hidden 4096]
                                 [--trace]
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import wspager  # noqa: E402
import wspager.torch as wt  # noqa: E402
import cuda_timeline  # noqa: E402
from torch_offload import llama_config, make_checkpoint, model_args  # noqa: E402


def log(*a):
    print(*a, flush=True)


def h2d(devices, nbytes=1 << 30, reps=5, piece=None):
    """Median GB/s of pinned host->GPU copies of `nbytes` to every device of
    `devices` at once (one source buffer each), summed; in copies of `piece`
    bytes each (as the pager copies its host tier's pages) if given."""
    srcs = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).fill_(1) for _ in devices]
    dsts = [torch.empty(nbytes, dtype=torch.uint8, device=d) for d in devices]
    times = []
    for _ in range(reps + 1):
        for d in devices:
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        step = piece or nbytes
        threads = [threading.Thread(target=lambda s=s, t=t: [
                       t[o:o + step].copy_(s[o:o + step], non_blocking=True)
                       for o in range(0, nbytes, step)])
                   for s, t in zip(srcs, dsts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for d in devices:
            torch.cuda.synchronize(d)
        times.append(time.perf_counter() - t0)
    return len(devices) * nbytes / statistics.median(times[1:]) / 1e9


def d2d(src, dst, nbytes=1 << 30, reps=5):
    """Median GB/s of copies of `nbytes` from GPU `src` to GPU `dst`
    (peer to peer where the GPUs allow it: NVLink or PCIe)."""
    a_ = torch.empty(nbytes, dtype=torch.uint8, device=src).fill_(1)
    b_ = torch.empty(nbytes, dtype=torch.uint8, device=dst)
    times = []
    for _ in range(reps + 1):
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        t0 = time.perf_counter()
        b_.copy_(a_)
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        times.append(time.perf_counter() - t0)
    del a_, b_
    return nbytes / statistics.median(times[1:]) / 1e9


def fills_report(name, model, events, t0, t1, passes):
    """Each GPU's slot fills (copy and decode, GPU-timed) from t0 to its last
    fill's end (a pager hands a fill's event over when it reaps the fill:
    at its next acquire, or at stats(), which the caller asks first): the
    time some fill ran (its link busy, at most), the rate from one fill's
    start to the next's (its link's, when they follow one another), its
    idle gaps over 0.3 ms with the layer whose fill came next, and the
    acquires that waited."""
    homes = model._wspager.homes
    home = {i: str(d) for i, (_pg, d) in homes.items()} if homes else None
    by = {}
    for stage, layer, b, e, n in events:
        key = home.get(layer, "?") if home else "cuda:0"
        by.setdefault(key, {"h2d": [], "wait": []})
        if stage in ("h2d", "wait"):
            by[key][stage].append((max(b, t0), min(e, t1), layer, n))
    for dev in sorted(by):
        fills = sorted(f for f in by[dev]["h2d"] if f[1] > f[0])
        if not fills:
            continue
        span = (max(f[1] for f in fills) - t0) / 1e6
        rate = (sum(f[3] for f in fills[:-1]) / max(fills[-1][0] - fills[0][0], 1)
                if len(fills) > 1 else 0.0)
        ran = cuda_timeline.union([(t0, t0)] + [(b, e) for b, e, _l, _n in fills])
        busy = cuda_timeline.length(ran) / 1e6
        first = {b: layer for b, _e, layer, _n in reversed(fills)}   # a fill starting at b
        gaps = [((b - prev_end) / 1e6, (prev_end - t0) / 1e6, first[b])
                for (_pb, prev_end), (b, _e) in zip(ran, ran[1:]) if b - prev_end > 0.3e6]
        waits = by[dev]["wait"]
        waited = sum(w[1] - w[0] for w in waits) / 1e6
        log(f"  {name}, {dev}: fills ran {busy:.1f} of {span:.1f} ms ({busy / span:.0%}; "
            f"{len(fills)} fills, {rate:.1f} GB/s start to start); {len(gaps)} gaps over 0.3 ms, "
            f"{sum(g[0] for g in gaps):.1f} ms in all; acquires waited {len(waits)} times, "
            f"{waited:.1f} ms")
        for g, at, layer in sorted(gaps, reverse=True)[:6]:
            log(f"    idle {g:.2f} ms from {at:.1f} ms, then layer {layer}")


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, "/var/tmp/wsp-devices", tokens=16)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--host-cache", default="12G")
    ap.add_argument("--gpu-slots", type=int, default=None,
                    help="slots a GPU (default: wspager's, 3 on one GPU, more over several)")
    ap.add_argument("--trace", action="store_true",
                    help="also time each GPU's slot fills in one more rep: how busy each "
                         "link is and where it idles, the events in DIR/fills-N.json (N: the "
                         "pagers; they then call back into Python in every rep: compare the "
                         "rows with a run without it)")
    a = ap.parse_args()
    if torch.cuda.device_count() < 2:
        log("torch_devices: fewer than two CUDA devices")
        sys.exit(77)
    cfg = llama_config(a.layers, a.hidden, a.intermediate, a.vocab)
    ck = os.path.join(a.dir, "llama")
    t0 = time.time()
    make_checkpoint(ck, cfg)
    pack = ck + ".wsp"
    if not os.path.exists(os.path.join(pack, "manifest.wspm")):
        wspager.convert(ck, pack, force=True)
    with wspager.Pack(pack) as pk:
        weight_bytes = pk.summary["raw_bytes"]
        ratio = pk.summary["raw_bytes"] / pk.summary["stored_bytes"]
    log(f"checkpoint and pack: {time.time() - t0:.1f} s; weights {weight_bytes / 1e9:.2f} GB, "
        f"pack ratio {ratio:.3f}; {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}")
    one = [torch.device("cuda", 0)]
    two = [torch.device("cuda", 0), torch.device("cuda", 1)]
    link = {"cuda:0": h2d(one), "cuda:1": h2d([two[1]]), "both": h2d(two)}
    if a.trace:
        link["both, 2 MiB copies"] = h2d(two, piece=2 << 20)
    log("ceilings, pinned host->GPU: " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in link.items())
        + f"; GPU->GPU cuda:0->cuda:1 {d2d(two[0], two[1]):.1f} GB/s")
    ids = torch.randint(0, a.vocab, (1, a.tokens), device="cuda:0")
    rows, logits = {}, {}
    for name, device in (("one GPU", "cuda:0"), ("two GPUs", ["cuda:0", "cuda:1"])):
        events = []
        extra = {"trace": lambda *ev: events.append(ev)} if a.trace else {}
        model = wt.from_pretrained(pack, config=ck, device=device, host_cache=a.host_cache,
                                   gpu_slots=a.gpu_slots, **extra)
        pagers = model._wspager.pagers
        with torch.no_grad():
            for _ in range(3):            # the host tier filled, the order learnt
                out = model(ids).logits
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            # pinning runs in the background: until it stops growing (30 s at most)
            t_pin, last = time.time(), None
            while time.time() - t_pin < 30:
                now = [pg.stats()["pinned_bytes"] for pg in pagers]
                if now == last:
                    break
                last = now
                time.sleep(1.0)
            # who decodes is measured while running (wsp_who_decodes): forwards
            # until every pager has chosen, so that no timed pass is a trial's;
            # each waited for, as a generating loop does (else the host issues
            # 200 forwards before the trial's copies are even made)
            n = 0
            while any(pg.who_decodes() == "trying" for pg in pagers) and n < 200:
                out = model(ids).logits
                torch.cuda.synchronize(0)
                torch.cuda.synchronize(1)
                n += 1
            decoders = "/".join(pg.who_decodes() for pg in pagers)
            s0 = [pg.stats() for pg in pagers]
            times = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                for _ in range(a.passes):
                    out = model(ids).logits
                torch.cuda.synchronize(0)
                torch.cuda.synchronize(1)
                times.append(time.perf_counter() - t0)
            s1 = [pg.stats() for pg in pagers]
            if a.trace:                   # one more rep, its fills timed
                events.clear()
                t0 = time.monotonic_ns()
                for _ in range(a.passes):
                    out = model(ids).logits
                torch.cuda.synchronize(0)
                torch.cuda.synchronize(1)
                t1 = time.monotonic_ns()
                for pg in pagers:         # reaps the fills done: their events come now
                    pg.stats()
                fills_report(name, model, list(events), t0, t1, a.passes)
                with open(os.path.join(a.dir, f"fills-{len(pagers)}.json"), "w") as f:
                    json.dump({"t0": t0, "t1": t1, "events": events}, f)
        n = a.reps * a.passes
        h2d_fwd = sum(b["bytes_h2d"] - e["bytes_h2d"] for b, e in zip(s1, s0)) / n
        hits = sum(b["gpu_hits"] - e["gpu_hits"] for b, e in zip(s1, s0))
        acq = sum(b["acquires"] - e["acquires"] for b, e in zip(s1, s0))
        logits[name] = out.float().cpu()
        gbps = a.passes * weight_bytes / statistics.median(times) / 1e9
        rows[name] = gbps
        slots = "+".join(str(st["gpu_slots"]) for st in s1)
        ms = statistics.median(times) / a.passes * 1e3
        log(f"{name:9s} {gbps:7.1f} GB/s of raw weights ({ms:.1f} ms a forward, {slots} slots, "
            f"decoded by: {decoders}); "
            f"over the links {h2d_fwd / 1e9:.2f} GB a forward "
            f"({h2d_fwd / weight_bytes:.3f} of the raw weights); {hits} of {acq} acquires "
            f"found their layer in a slot already (prefetched)")
        wt.remove(model)
        del model
        torch.cuda.empty_cache()
    same = torch.equal(logits["one GPU"], logits["two GPUs"])
    log(f"two GPUs / one GPU: {rows['two GPUs'] / rows['one GPU']:.2f}x; one GPU = "
        f"{rows['one GPU'] / link['cuda:0']:.2f}x its link, two GPUs = "
        f"{rows['two GPUs'] / link['both']:.2f}x both links at once; logits identical: {same}")


if __name__ == "__main__":
    main()
