"""Where the GPU's time went in a profiled region: read a torch.profiler
Chrome trace (its device rows: kernels, copies, fills on their streams) and
say, for the stream that computes (the one with the most kernel time), how
long it was busy (its kernels, copies and fills), how long it sat idle
between them and where, how long the region went on after its last work,
and what ran beside it (the pager's copies each way, its decode kernels).
Each gap is also attributed, where the trace has the CUDA calls that
launched the work (torch.profiler records them with the device activity):
the host launched the next kernel late (the host paced the stream), or
launched it early and the stream waited (on an event: a fill, a copy).

  python3 bench/cuda_timeline.py TRACE.json[.gz] [REFERENCE.json[.gz]]

With a reference (the same work resident), the compute kernels' own time is
compared too: kernels slowed by what runs beside them show up there, not as
idle time.  No torch needed to read a trace.
"""
from __future__ import annotations

import gzip
import json
import sys
from typing import Dict, List, Optional, Tuple

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CATS = {"cuda_runtime", "cuda_driver"}   # the calls that launched them


def load(path: str, calls: bool = False) -> List[dict]:
    """The device events of a trace: dicts with cat, name, stream, b, e (us),
    corr; with calls, the host's CUDA calls too (cat in HOST_CATS)."""
    cats = GPU_CATS | HOST_CATS if calls else GPU_CATS
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    out = []
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") != "X" or ev.get("cat") not in cats:
            continue
        args = ev.get("args", {})
        b = float(ev["ts"])
        out.append({"cat": ev["cat"], "name": ev.get("name", ""), "stream": args.get("stream"),
                    "b": b, "e": b + float(ev.get("dur", 0)), "bytes": args.get("bytes", 0),
                    "corr": args.get("correlation"), "tid": ev.get("tid")})
    return out


def union(iv: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    merged: List[Tuple[float, float]] = []
    for b, e in sorted(iv):
        if merged and b <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((b, e))
    return merged


def length(iv: List[Tuple[float, float]]) -> float:
    return sum(e - b for b, e in iv)


def overlap(a: List[Tuple[float, float]], b: List[Tuple[float, float]]) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def copy_dir(ev: dict) -> Optional[str]:
    n = ev["name"]
    if "HtoD" in n:
        return "h2d"
    if "DtoH" in n:
        return "d2h"
    return None


def launch_cause(nxt: dict, idle_from: float, by_corr: Dict[object, dict],
                 by_tid: Dict[object, List[dict]]) -> Tuple[Optional[bool], str]:
    """Why the stream idled from idle_from until nxt ran: (True, ...) when
    the call that launched nxt returned after idle_from (the host was
    late), (False, ...) when before it (the stream waited on something
    enqueued ahead of nxt), (None, "") when the trace has no such call;
    the text names the launching thread's longest CUDA call inside the
    gap, which is often the reason (a thread that blocked in a
    synchronize could not launch)."""
    launch = by_corr.get(nxt.get("corr")) if nxt.get("corr") is not None else None
    if launch is None:
        return None, ""
    inside = [c for c in by_tid[launch["tid"]] if c["b"] < nxt["b"] and c["e"] > idle_from
              and c is not launch]
    longest = max(inside, key=lambda c: c["e"] - c["b"], default=None)
    also = (f"; longest call in it {longest['name']} {(longest['e'] - longest['b']) / 1e3:.3f} ms"
            if longest is not None else "")
    late = launch["e"] - idle_from
    if late > 0:
        return True, f"launched {late / 1e3:.3f} ms into the gap{also}"
    return False, f"launched {-late / 1e3:.3f} ms before the gap: the stream waited{also}"


def summarize(events: List[dict], gap_us: float = 20.0) -> Dict[str, object]:
    """Times in ms; gaps of the compute stream longer than gap_us listed,
    each as (ms, at ms, next work's name, launched late by the host (None:
    not known), how)."""
    by_corr: Dict[object, dict] = {}
    by_tid: Dict[object, List[dict]] = {}
    for ev in events:
        if ev["cat"] in HOST_CATS:
            by_corr[ev["corr"]] = ev
            by_tid.setdefault(ev["tid"], []).append(ev)
    events = [ev for ev in events if ev["cat"] in GPU_CATS]
    kernels: Dict[object, float] = {}
    for ev in events:
        if ev["cat"] == "kernel":
            kernels[ev["stream"]] = kernels.get(ev["stream"], 0.0) + ev["e"] - ev["b"]
    if not kernels:
        raise ValueError("no kernels in the trace (was CUDA activity profiled?)")
    compute = max(kernels, key=kernels.get)
    # The compute stream's own copies and fills (torch's) keep it busy too.
    comp = sorted((ev for ev in events if ev["stream"] == compute), key=lambda ev: ev["b"])
    begin = min(ev["b"] for ev in events)
    end = max(ev["e"] for ev in events)
    busy = union([(ev["b"], ev["e"]) for ev in comp])
    gaps = []
    for (b0, e0), (b1, _) in zip(busy, busy[1:]):
        if b1 - e0 > gap_us:
            nxt = next(ev for ev in comp if ev["b"] >= b1)
            gaps.append(((b1 - e0) / 1e3, (e0 - begin) / 1e3, nxt["name"],
                         *launch_cause(nxt, e0, by_corr, by_tid)))
    side = [ev for ev in events if ev["stream"] != compute]
    decode = union([(ev["b"], ev["e"]) for ev in side
                    if ev["cat"] == "kernel" and "exprans" in ev["name"]])
    out: Dict[str, object] = {
        "compute_stream": compute,
        "region_ms": (end - begin) / 1e3,
        "first_kernel_ms": (comp[0]["b"] - begin) / 1e3,
        "compute_busy_ms": length(busy) / 1e3,
        "compute_kernel_ms": kernels[compute] / 1e3,   # kernels only
        "compute_idle_ms": (busy[-1][1] - busy[0][0] - length(busy)) / 1e3,
        "tail_ms": (end - busy[-1][1]) / 1e3,
        "gaps": sorted(gaps, reverse=True),
        "decode_ms": length(decode) / 1e3,
        "decode_beside_compute_ms": overlap(decode, busy) / 1e3,
    }
    for d in ("h2d", "d2h"):
        cp = [ev for ev in events if ev["cat"] == "gpu_memcpy" and copy_dir(ev) == d]
        iv = union([(ev["b"], ev["e"]) for ev in cp])
        out[d + "_ms"] = length(iv) / 1e3
        out[d + "_bytes"] = sum(int(ev["bytes"] or 0) for ev in cp)
        out[d + "_beside_compute_ms"] = overlap(iv, busy) / 1e3
        out[d + "_after_compute_ms"] = length([(max(b, busy[-1][1]), e) for b, e in iv
                                               if e > busy[-1][1]]) / 1e3
    return out


def report(s: Dict[str, object], ref: Optional[Dict[str, object]] = None, top: int = 8) -> str:
    lines = [f"GPU timeline of the region: {s['region_ms']:.1f} ms, compute stream "
             f"{s['compute_stream']}",
             f"  compute busy {s['compute_busy_ms']:.1f} ms (kernels {s['compute_kernel_ms']:.1f} ms"
             + (f"; resident {ref['compute_kernel_ms']:.1f} ms" if ref else "") + ")",
             f"  before its first kernel {s['first_kernel_ms']:.2f} ms, idle between its "
             f"kernels {s['compute_idle_ms']:.1f} ms, after its last {s['tail_ms']:.1f} ms"]
    for d, what in (("h2d", "host->GPU"), ("d2h", "GPU->host")):
        if s[d + "_bytes"] or s[d + "_ms"]:
            lines.append(f"  {what} copies {s[d + '_ms']:.1f} ms ({s[d + '_bytes'] / 1e9:.2f} GB), "
                         f"{s[d + '_beside_compute_ms']:.1f} ms beside compute, "
                         f"{s[d + '_after_compute_ms']:.1f} ms after the last kernel")
    if s["decode_ms"]:
        lines.append(f"  decode kernels {s['decode_ms']:.1f} ms, {s['decode_beside_compute_ms']:.1f} "
                     f"ms of it beside compute")
    for ms, at, name, _, cause in s["gaps"][:top]:
        lines.append(f"  gap {ms:7.3f} ms at {at:8.2f} ms, then {name[:70]}"
                     + (f"\n      {cause}" if cause else ""))
    late = [ms for ms, _, _, was_late, _ in s["gaps"] if was_late]
    if any(was_late is not None for _, _, _, was_late, _ in s["gaps"]):
        lines.append(f"  of {len(s['gaps'])} gaps ({sum(g[0] for g in s['gaps']):.1f} ms), "
                     f"{len(late)} ({sum(late):.1f} ms) had their next work launched late by "
                     f"the host; the rest waited on the device")
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: cuda_timeline.py TRACE.json[.gz] [REFERENCE.json[.gz]]", file=sys.stderr)
        return 2
    s = summarize(load(argv[1], calls=True))
    ref = summarize(load(argv[2])) if len(argv) == 3 else None
    print(report(s, ref))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
