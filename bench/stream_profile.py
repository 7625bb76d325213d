"""Where the time goes when the pager streams a pack from its host tier:
every layer acquired and released in order, no compute, as bench/gpu_bench
step 1 does, through the Python binding so that torch.profiler sees the
library's copies and decode kernels.  Printed: the pinned host->GPU
ceiling (1 GiB copies, median of 5: torch_train.ceilings), GB/s of raw weights over timed
passes, then for passes profiled back to back how busy the copy stream was
(its copies' union over the region, and between its first and last copy),
the link's rate while copying and per copy, the decode kernels' time, and
the copy stream's idle gaps.

  python3 bench/stream_profile.py PACK [--host-cache 12G --slots 3 --passes 3 --trace OUT.json]
"""
import argparse
import gzip
import os
import shutil
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import wspager  # noqa: E402
import cuda_timeline  # noqa: E402
from torch_train import ceilings  # noqa: E402


def one_pass(pg, n: int, stream: int) -> None:
    for i in range(n):
        pg.acquire(i, stream).release()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pack")
    ap.add_argument("--host-cache", default="12G")
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--profile-passes", type=int, default=4,
                    help="passes profiled back to back, no sync between them (default 4): "
                         "the copy stream's steady state, not one pass's start and end")
    ap.add_argument("--trace", help="write the profiled passes' trace here (.gz added)")
    a = ap.parse_args()
    ceil = ceilings()["h2d"]
    t_open = time.perf_counter()
    pg = wspager.Pager(a.pack, device=0, host_cache=a.host_cache, gpu_slots=a.slots)
    n = len(pg.pack.layers)
    raw = sum(L.raw_bytes for L in pg.pack.layers)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(2):   # the host tier filled, the order learnt
        one_pass(pg, n, stream)
    torch.cuda.synchronize()
    # The steady state: the host tier pins itself in the background after
    # the open, and every CUDA call waits for the driver while it does.
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        st = pg.stats()
        if st["pinned_bytes"] + (2 << 20) > st["host_cache_bytes"]:
            break
        time.sleep(0.01)
    pinned_s = time.perf_counter() - t_open
    ts = []
    for _ in range(a.passes):
        t0 = time.perf_counter()
        one_pass(pg, n, stream)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    st = pg.stats()
    gbs = raw / statistics.median(ts) / 1e9
    print(f"{torch.cuda.get_device_name()}; pinned host->GPU {ceil:.1f} GB/s (1 GiB copies)")
    print(f"host tier pinned ({st['pinned_bytes'] / 2**30:.2f} GiB) {pinned_s:.2f} s after the "
          f"open")
    print(f"pack {a.pack}: {n} layers, {raw / 1e9:.2f} GB raw; host hits "
          f"{st['host_hits']}, misses {st['misses']} over {st['acquires']} acquires")
    print(f"streaming: {gbs:.1f} GB/s of raw weights (median of {a.passes} passes) = "
          f"{gbs / ceil:.3f}x the pinned ceiling")
    # The link's rate moves within seconds on some machines: the ceiling
    # again right before and right after, the better of the two.
    before = ceilings()["h2d"]
    t0 = time.perf_counter()
    for _ in range(10):
        one_pass(pg, n, stream)
    torch.cuda.synchronize()
    b2b = 10 * raw / (time.perf_counter() - t0) / 1e9
    after = ceilings()["h2d"]
    print(f"streaming, 10 passes back to back: {b2b:.1f} GB/s of raw weights = "
          f"{b2b / max(before, after):.3f}x the pinned ceiling right before / after "
          f"({before:.1f} / {after:.1f} GB/s, the better)")

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(a.profile_passes):
            one_pass(pg, n, stream)
        torch.cuda.synchronize()
        t_prof = time.perf_counter() - t0
    path = a.trace or os.path.join(os.environ.get("TMPDIR", "/tmp"), "stream_profile.json")
    prof.export_chrome_trace(path)
    events = cuda_timeline.load(path)
    if a.trace:
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
    os.remove(path)
    pg.close()

    begin = min(e["b"] for e in events)
    end = max(e["e"] for e in events)
    h2d = [e for e in events if cuda_timeline.copy_dir(e) == "h2d"]
    copy_stream = max({e["stream"] for e in h2d}, key=lambda s: sum(
        e["e"] - e["b"] for e in h2d if e["stream"] == s))
    cp = sorted((e for e in h2d if e["stream"] == copy_stream), key=lambda e: e["b"])
    busy = cuda_timeline.union([(e["b"], e["e"]) for e in cp])
    copied = sum(int(e["bytes"] or 0) for e in cp)
    dec = cuda_timeline.union([(e["b"], e["e"]) for e in events
                               if e["cat"] == "kernel" and "exprans" in e["name"]])
    region = (end - begin) / 1e3
    k = a.profile_passes
    print(f"profiled {k} pass{'es' if k > 1 else ''} back to back: {region:.1f} ms on the device "
          f"({k * raw / t_prof / 1e9:.1f} GB/s of raw weights by the host clock, the profiler "
          f"running)")
    print(f"  copy stream busy {cuda_timeline.length(busy) / 1e3:.1f} ms = "
          f"{cuda_timeline.length(busy) / 1e3 / region:.3f} of the region; {copied / 1e9:.2f} GB "
          f"in {len(cp)} copies at {copied / (cuda_timeline.length(busy) / 1e6) / 1e9:.1f} GB/s "
          f"while copying")
    if busy:
        # Between the first copy's start and the last one's end: what the
        # link did in the steady state, without the start and the drain.
        span = (busy[-1][1] - busy[0][0]) / 1e3
        print(f"  from the first copy to the end of the last: {span:.2f} ms, busy "
              f"{cuda_timeline.length(busy) / 1e3 / span:.4f}, {copied / (span * 1e6):.1f} GB/s "
              f"over the link = {copied / (span * 1e6) / ceil:.4f} of the ceiling")
    big = sorted(int(e["bytes"] or 0) / ((e["e"] - e["b"]) * 1e3) for e in cp
                 if int(e["bytes"] or 0) >= 16 << 20 and e["e"] > e["b"])
    if big:
        print(f"  copies of 16 MiB or more: {len(big)}, GB/s each: min {big[0]:.1f}, "
              f"median {big[len(big) // 2]:.1f}, max {big[-1]:.1f}")
    print(f"  decode kernels {cuda_timeline.length(dec) / 1e3:.1f} ms, "
          f"{cuda_timeline.overlap(dec, busy) / 1e3:.1f} ms of it while the copy stream copied")
    between = [((b1 - e0) / 1e3, (e0 - begin) / 1e3) for (_, e0), (b1, _) in zip(busy, busy[1:])]
    gaps = sorted(g for g in between if g[0] > 0.010)
    lead = (busy[0][0] - begin) / 1e3 if busy else 0.0
    tail = (end - busy[-1][1]) / 1e3 if busy else 0.0
    print(f"  copy stream idle: before the first copy {lead:.2f} ms, between copies "
          f"{sum(g for g, _ in between):.3f} ms in {len(between)} gaps "
          f"({sum(g for g, _ in gaps):.3f} ms in {len(gaps)} over 10 us), after the last "
          f"{tail:.2f} ms")
    for g, at in gaps[-6:][::-1]:
        print(f"    gap {g:.3f} ms at {at:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
