"""How much slower a training step's GEMMs run while the link copies beside
them, with no pager in the way: the compute-bound ceiling of paged
training.

The same bf16 GEMMs (the shapes of the 8-layer 4096-wide Llama of
bench/torch_train.py at --batch B: a layer's projections, forward and the
two GEMMs of each backward) are timed with CUDA events on the default
stream alone, then while pinned host->GPU copies, GPU->host copies, or both
run without pause on other streams (what paging weights in and gradients
out puts beside the compute), from torch's pinned memory and from memory
page-locked with cudaHostRegister in 4 KiB and in 2 MiB pages (the pager
registers its own).  The modes take turns, --rounds times, so that drift
(the GPU's clock follows its power and temperature) hits each alike.  Printed per mode: the
GEMMs' median time and its ratio to alone, the copies' GB/s, and the
GPU's SM clock and power drawn (nvidia-smi sampled every 50 ms, where
present): a ratio above 1 with a lower clock says the card slowed itself
(its power limit), one at the same clock says the copies took memory
bandwidth or cache from the kernels.

A step is more than its GEMMs: a thousand short kernels (elementwise ops,
fills, reductions) that the host queued long before they run.  The chain
workload times such kernels back to back (queued behind a sleeping kernel
so that the host never paces them) and prints the device's gap between
two of them, alone and beside the copies: traces of paged training show
that gap growing from ~1.7 us to 3.6-4.9 us while the link copies.  The
chain also runs beside copies cut into the pieces the pager copies in (a
fill's 32 MiB, the landing ring's 4 MiB), and on a high-priority stream.

  python3 bench/copy_interference.py [--batch 12] [--rounds 3] [--work gemms|chain|both]
"""
import argparse
import ctypes
import mmap
import statistics
import subprocess
import threading
import time

import torch


def gemm_set(batch: int, seq: int, hidden: int, inter: int, kv: int):
    """(activation, weight, output gradient) of each of a layer's
    projections: run_gemms does its forward GEMM and the backward's two
    (input gradient, weight gradient)."""
    t = batch * seq
    dev, dt = "cuda", torch.bfloat16
    shapes = [(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden),
              (hidden, inter), (hidden, inter), (inter, hidden)]
    work = []
    for k, n in shapes:
        x = torch.randn(t, k, device=dev, dtype=dt)
        w = torch.randn(k, n, device=dev, dtype=dt)
        g = torch.randn(t, n, device=dev, dtype=dt)
        work.append((x, w, g))
    return work


def run_gemms(work, reps: int) -> float:
    """Milliseconds for `reps` passes over the set, on the current stream."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        for x, w, g in work:
            torch.mm(x, w)          # forward
            torch.mm(g, w.t())      # input gradient
            torch.mm(x.t(), g)      # weight gradient
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def run_chain(x: torch.Tensor, n: int, stream=None) -> float:
    """Milliseconds for n short kernels back to back on `stream` (default:
    the current one), queued behind a sleeping kernel so that the host is
    far ahead of them: what is timed is the device's own pace."""
    s = stream or torch.cuda.current_stream()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)   # ~30 ms at H200 clocks: time to queue n launches
        a.record()
        for _ in range(n):
            x.mul_(1.0)
        b.record()
    b.synchronize()
    return a.elapsed_time(b)


_REGISTERED = {}   # (bytes, huge, index) -> registered(): made once, reused by every round


def registered_pool(nbytes: int, huge: bool, index: int):
    """The index-th registered buffer of this kind, made at first use."""
    key = (nbytes, huge, index)
    if key not in _REGISTERED:
        _REGISTERED[key] = registered(nbytes, huge)
    return _REGISTERED[key]


def registered(nbytes: int, huge: bool):
    """Host memory of our own mapping, page-locked with cudaHostRegister (as
    the pager pins its host cache and rings), in 2 MiB pages where the
    kernel gives them (MADV_HUGEPAGE) or in 4 KiB ones (MADV_NOHUGEPAGE);
    torch's pin_memory takes cudaHostAlloc's memory instead."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = mmap.mmap(-1, nbytes)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(nbytes), 14 if huge else 15)
    t = torch.frombuffer(buf, dtype=torch.uint8)
    t.fill_(1)   # touch every page before pinning
    rc = torch.cuda.cudart().cudaHostRegister(addr, nbytes, 0)
    if int(rc) != 0:
        raise RuntimeError(f"cudaHostRegister: {rc}")
    return t, buf


class Copier:
    """Copies of `nbytes` each way, back to back, on their own streams until
    stopped; counts the bytes that completed.  pages: "alloc" (torch's
    pinned memory), "4k" or "2m" (registered())."""

    def __init__(self, h2d: bool, d2h: bool, pages: str = "alloc", nbytes: int = 256 << 20,
                 piece: int = 0):
        self.dirs = [d for d, on in (("h2d", h2d), ("d2h", d2h)) if on]
        if pages == "alloc":
            self.host = {d: torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                         for d in self.dirs}
        else:
            self.host = {d: registered_pool(nbytes, pages == "2m", k)[0]
                         for k, d in enumerate(self.dirs)}
        self.dev = {d: torch.empty(nbytes, dtype=torch.uint8, device="cuda") for d in self.dirs}
        self.streams = {d: torch.cuda.Stream() for d in self.dirs}
        self.nbytes, self.stop, self.bytes = nbytes, False, {d: 0 for d in self.dirs}
        self.piece = piece or nbytes   # each copy call's size
        self.threads = [threading.Thread(target=self.loop, args=(d,)) for d in self.dirs]

    def loop(self, d: str):
        s = self.streams[d]
        while not self.stop:
            with torch.cuda.stream(s):
                for off in range(0, self.nbytes, self.piece):
                    dev = self.dev[d][off:off + self.piece]
                    host = self.host[d][off:off + self.piece]
                    if d == "h2d":
                        dev.copy_(host, non_blocking=True)
                    else:
                        host.copy_(dev, non_blocking=True)
            s.synchronize()
            self.bytes[d] += self.nbytes

    def __enter__(self):
        self.t0 = time.perf_counter()
        for t in self.threads:
            t.start()
        time.sleep(0.05)   # copies under way before the GEMMs start
        return self

    def __exit__(self, *exc):
        self.stop = True
        for t in self.threads:
            t.join()
        self.secs = time.perf_counter() - self.t0

    def rates(self) -> str:
        return ", ".join(f"{d} {self.bytes[d] / self.secs / 1e9:.1f} GB/s" for d in self.dirs)


class Sampler:
    """nvidia-smi's SM clock and power every 50 ms while running (absent: no figures)."""

    def __enter__(self):
        try:
            self.p = subprocess.Popen(
                ["nvidia-smi", "-i", str(torch.cuda.current_device()),
                 "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                 "-lms", "50"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.p = None
        return self

    def __exit__(self, *exc):
        self.out = ""
        if self.p:
            self.p.terminate()
            self.out, _ = self.p.communicate()

    def summary(self) -> str:
        rows = []
        for line in self.out.splitlines():
            try:
                rows.append([float(v) for v in line.split(",")])
            except ValueError:
                continue
        if len(rows) < 3:
            return "no clock samples"
        rows = rows[1:-1]   # the edges may fall outside the GEMMs
        return (f"SM clock {statistics.median(r[0] for r in rows):.0f} MHz, "
                f"power {statistics.median(r[1] for r in rows):.0f} W")


COPY_MODES = {   # name: (host->GPU, GPU->host, host memory, piece bytes, high-priority compute)
    "alone": (False, False, "", 0, False),
    "h2d": (True, False, "alloc", 0, False),
    "d2h": (False, True, "alloc", 0, False),
    "both": (True, True, "alloc", 0, False),
    "both-4k": (True, True, "4k", 0, False),
    "both-2m": (True, True, "2m", 0, False),
}
CHAIN_MODES = {   # also the pager's copy sizes, and a high-priority compute stream
    **{m: COPY_MODES[m] for m in ("alone", "h2d", "d2h", "both")},
    "h2d-32MiB-pieces": (True, False, "2m", 32 << 20, False),     # a fill's
    "d2h-4MiB-pieces": (False, True, "2m", 4 << 20, False),       # the landing ring's
    "d2h-16MiB-pieces": (False, True, "2m", 16 << 20, False),
    "both-4MiB-pieces": (True, True, "2m", 4 << 20, False),
    "both-priority": (True, True, "2m", 0, True),
}


def timed_rounds(modes, rounds: int, run):
    """Each mode's times (ms) and notes over `rounds` rounds, the modes
    taking turns; run(high_priority) times the workload once."""
    times = {m: [] for m in modes}
    notes = {m: [] for m in modes}
    for _ in range(rounds):
        for m, (h2d, d2h, pages, piece, prio) in modes.items():
            with Sampler() as smp:
                if h2d or d2h:
                    with Copier(h2d, d2h, pages, piece=piece) as cp:
                        times[m].append(run(prio))
                    notes[m].append(cp.rates() + "; ")
                else:
                    times[m].append(run(prio))
                    notes[m].append("")
            notes[m][-1] += smp.summary()
    return times, notes


def gemm_report(a):
    inter, kv = a.hidden * 11008 // 4096, max(128, a.hidden // 4)
    work = gemm_set(a.batch, a.seq, a.hidden, inter, kv)
    run_gemms(work, 5)   # warm-up: cuBLAS picks its kernels
    times, notes = timed_rounds(COPY_MODES, a.rounds, lambda prio: run_gemms(work, a.reps))
    base = statistics.median(times["alone"])
    flops = 3 * 2 * a.batch * a.seq * sum(w.shape[0] * w.shape[1] for _, w, _ in work) * a.reps
    print(f"{torch.cuda.get_device_name()}; GEMMs of batch {a.batch}x{a.seq}, hidden {a.hidden}: "
          f"{base / a.reps:.2f} ms a pass alone ({flops / base / 1e9:.0f} TFLOP/s)")
    for m in COPY_MODES:
        med = statistics.median(times[m])
        print(f"  {m:5s}: {med / a.reps:.2f} ms a pass, {med / base:.3f}x alone "
              f"(rounds {', '.join(f'{t / a.reps:.2f}' for t in times[m])}); "
              f"{' | '.join(notes[m])}")


def chain_report(a):
    x = torch.ones(a.chain_elems, device="cuda", dtype=torch.bfloat16)
    high = torch.cuda.Stream(priority=-1)
    run_chain(x, 100)   # warm-up
    times, notes = timed_rounds(CHAIN_MODES, a.rounds,
                                lambda prio: run_chain(x, a.chain, high if prio else None))
    base = statistics.median(times["alone"]) / a.chain * 1e3
    print(f"chain of {a.chain} short kernels ({a.chain_elems} bf16 elements each, "
          f"queued ahead): {base:.2f} us a kernel alone")
    for m in CHAIN_MODES:
        us = statistics.median(times[m]) / a.chain * 1e3
        print(f"  {m:16s}: {us:.2f} us a kernel, {us - base:+.2f} us against alone "
              f"(rounds {', '.join(f'{t / a.chain * 1e3:.2f}' for t in times[m])}); "
              f"{' | '.join(notes[m])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=40, help="passes over the GEMMs per timing")
    ap.add_argument("--work", choices=("gemms", "chain", "both"), default="both")
    ap.add_argument("--chain", type=int, default=2000, help="short kernels per timing")
    ap.add_argument("--chain-elems", type=int, default=1 << 21,
                    help="elements each short kernel scales in place")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no GPU")
        return 77
    if a.work in ("gemms", "both"):
        gemm_report(a)
    if a.work in ("chain", "both"):
        chain_report(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
