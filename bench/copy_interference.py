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

  python3 bench/copy_interference.py [--batch 12] [--rounds 3]
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

    def __init__(self, h2d: bool, d2h: bool, pages: str = "alloc", nbytes: int = 256 << 20):
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
        self.threads = [threading.Thread(target=self.loop, args=(d,)) for d in self.dirs]

    def loop(self, d: str):
        s = self.streams[d]
        while not self.stop:
            with torch.cuda.stream(s):
                if d == "h2d":
                    self.dev[d].copy_(self.host[d], non_blocking=True)
                else:
                    self.host[d].copy_(self.dev[d], non_blocking=True)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=40, help="passes over the GEMMs per timing")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no GPU")
        return 77
    inter, kv = a.hidden * 11008 // 4096, max(128, a.hidden // 4)
    work = gemm_set(a.batch, a.seq, a.hidden, inter, kv)
    run_gemms(work, 5)   # warm-up: cuBLAS picks its kernels
    modes = {"alone": (False, False, ""), "h2d": (True, False, "alloc"),
             "d2h": (False, True, "alloc"), "both": (True, True, "alloc"),
             "both-4k": (True, True, "4k"), "both-2m": (True, True, "2m")}
    times = {m: [] for m in modes}
    notes = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m, (h2d, d2h, pages) in modes.items():
            with Sampler() as smp:
                if h2d or d2h:
                    with Copier(h2d, d2h, pages) as cp:
                        times[m].append(run_gemms(work, a.reps))
                    notes[m].append(cp.rates() + "; ")
                else:
                    times[m].append(run_gemms(work, a.reps))
                    notes[m].append("")
            notes[m][-1] += smp.summary()
    base = statistics.median(times["alone"])
    flops = 3 * 2 * a.batch * a.seq * sum(w.shape[0] * w.shape[1] for _, w, _ in work) * a.reps
    print(f"{torch.cuda.get_device_name()}; GEMMs of batch {a.batch}x{a.seq}, hidden {a.hidden}: "
          f"{base / a.reps:.2f} ms a pass alone ({flops / base / 1e9:.0f} TFLOP/s)")
    for m in modes:
        med = statistics.median(times[m])
        print(f"  {m:5s}: {med / a.reps:.2f} ms a pass, {med / base:.3f}x alone "
              f"(rounds {', '.join(f'{t / a.reps:.2f}' for t in times[m])}); "
              f"{' | '.join(notes[m])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
