"""Where a cold `wt.from_pretrained` + first token spends its time
(bench/torch_ttft.py --timeline): the phases of the load, marked by
wrapping the functions that do them, and the bytes the process has read
from storage by then (/proc/self/io read_bytes, which O_DIRECT and
io_uring reads count), sampled every few milliseconds along with what the
pagers have read and pinned.  Observation only: the wrapped functions run
unchanged."""
import threading
import time

import wspager.torch as wt
from wspager import _bind, _hf, _plan, _weights

PHASES = (("skeleton", _hf, "skeleton"), ("open", wt, "_open_pagers"), ("bind", wt, "bind"))
# Inside those: the time each of these took in all (the calls, seconds).
TALLIES = (("bind: placeholders", _plan.Placeholders, "__call__"),
           ("bind: kept tensors read", _bind, "_read"),
           ("bind: hooks", _bind.PagedModuleHook, "attach"),
           ("state_dict hooks", _weights.StateDictSource, "attach"))


def proc_field(path: str, key: str) -> int:
    """The number after `key:` in a /proc file of this process (0 if absent)."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def read_bytes() -> int:
    return proc_field("/proc/self/io", "read_bytes")


class Timeline:
    """Marks and samples relative to start(); install() before the load."""

    def __init__(self, every_s: float = 0.005):
        self.every = every_s
        self.marks = []        # (name, t)
        self.tallies = {}      # name -> [calls, seconds]
        self.samples = []      # (t, bytes read by the process, by the pagers, pinned)
        self.pagers = []
        self.t0 = None
        self._stop = threading.Event()

    def mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter() - self.t0))

    def install(self) -> None:
        for name, mod, attr in PHASES:
            fn = getattr(mod, attr)

            def wrapped(*a, _fn=fn, _name=name, **k):
                self.mark(_name + " start")
                out = _fn(*a, **k)
                if _name == "open":
                    self.pagers = list(out)
                self.mark(_name + " end")
                return out
            setattr(mod, attr, wrapped)
        for name, owner, attr in TALLIES:
            fn = getattr(owner, attr)
            tally = self.tallies.setdefault(name, [0, 0.0])

            def timed(*a, _fn=fn, _tally=tally, **k):
                t = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    _tally[0] += 1
                    _tally[1] += time.perf_counter() - t
            setattr(owner, attr, timed)

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.base = read_bytes()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            got = pinned = 0
            for pg in self.pagers:
                try:
                    st = pg.stats()
                except Exception:   # closed meanwhile
                    continue
                got += st["bytes_read"]
                pinned += st["pinned_bytes"]
            self.samples.append((time.perf_counter() - self.t0, read_bytes() - self.base,
                                 got, pinned))
            time.sleep(self.every)

    def stop(self) -> dict:
        self._stop.set()
        return {"marks": self.marks, "samples": self.samples, "tallies": self.tallies}


def report(tl: dict, disk_gbps: float, log) -> None:
    """The marks with the bytes read by each, then the read rate in 0.1 s
    steps against the disk's rate measured in the same run."""
    s = tl["samples"]

    def at(t):
        before = [x for x in s if x[0] <= t]
        return before[-1] if before else (t, 0, 0, 0)
    for name, t in tl["marks"]:
        x = at(t)
        log(f"  {t:6.3f} s  {name:16s} read {x[1] / 1e9:5.2f} GB (pagers {x[2] / 1e9:5.2f}), "
            f"pinned {x[3] / 2**30:5.2f} GiB")
    for name, (calls, secs) in tl.get("tallies", {}).items():
        log(f"  {name}: {calls} calls, {secs:.3f} s")
    if not s:
        return
    end, step, prev = s[-1][0], 0.1, (0.0, 0, 0, 0)
    t, line = step, []
    while t <= end + step:
        x = at(t)
        rate = (x[1] - prev[1]) / max(x[0] - prev[0], 1e-9) / 1e9
        line.append(f"{rate / disk_gbps:4.2f}")
        prev, t = x, t + step
    log("  read rate / disk rate, each 0.1 s: " + " ".join(line))
