"""Where a thread's time went in a profiled region: read a torch.profiler
Chrome trace (its host rows) and, for the thread that launched the most
work (or the --threads N that launched most), say how much of the region
it spent in each named span (annotations such as the bench's wspager.*
ones, torch operators) and in each CUDA
runtime call (a cudaMalloc, cudaFree or a synchronize there is a host
stall), and how much lay outside every span (Python, and C calls nobody
annotated).

  python3 bench/cpu_time.py TRACE.json[.gz] [--top 25] [--threads 1]

Spans nest: each name's time is its own spans' union, so an annotation
around an operator counts both.  No torch needed to read a trace.
"""
from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from typing import Dict, List, Tuple

HOST_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"}


def union_length(iv: List[Tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for b, e in sorted(iv):
        if e <= end:
            continue
        total += e - max(b, end)
        end = e
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1,
                    help="this many threads, those that launched the most first")
    a = ap.parse_args()
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        doc = json.load(f)
    threads: Dict[Tuple, List[dict]] = defaultdict(list)
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") in HOST_CATS:
            threads[(ev.get("pid"), ev.get("tid"))].append(ev)
    if not threads:
        raise SystemExit(f"{a.trace}: no host events")
    busiest = sorted(threads, key=lambda k: -sum(e["cat"] == "cuda_runtime" for e in threads[k]))
    for key in busiest[:a.threads]:
        summarize(a.trace, key, threads[key], a.top)


def summarize(trace: str, key: Tuple, evs: List[dict], top: int) -> None:
    begin = min(float(e["ts"]) for e in evs)
    end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in evs)
    wall = end - begin
    spans = defaultdict(list)
    for e in evs:
        b = float(e["ts"])
        spans[(e["cat"], e["name"])].append((b, b + float(e.get("dur", 0))))
    covered = union_length([s for k, v in spans.items() if k[0] != "python_function" for s in v])
    print(f"{trace}: thread {key[1]}, {wall / 1e3:.1f} ms from its first event to its last; "
          f"outside every span {(wall - covered) / 1e3:.1f} ms ({1 - covered / wall:.0%})")
    rows = sorted(((union_length(v), len(v), k) for k, v in spans.items()), reverse=True)
    for cat in ("user_annotation", "cuda_runtime", "cpu_op"):
        print(f"-- {cat}: ms (share of the region), calls, us a call")
        for t, n, k in [r for r in rows if r[2][0] == cat][:top]:
            print(f"{t / 1e3:9.2f} ms {t / wall:6.1%} {n:7d} {t / n:9.1f}  {k[1]}")

if __name__ == "__main__":
    main()
