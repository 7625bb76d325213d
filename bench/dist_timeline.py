"""Where each layer's time goes in the data-parallel feed over the GPUs
(wspager._devfeed.DeviceFeed), host and GPU on one clock, without a
tracing profiler: bench/torch_dist.py records it with
WSP_DIST_TIMELINE=1 for the cold forward (DIR/timeline-cold-rankN.json)
and for two warm forwards after the timed ones (DIR/timeline-rankN.json);
`python3 bench/dist_timeline.py FILE` sums one.

Points, each (layer, what, ms since the start):
  host, the forward's thread: need / needed (DeviceFeed.need), acquired
  (Offload.acquire returned), released (Offload.release returned);
  queued (the forward's thread put the layer's exchange on the queue);
  host, the exchanges' thread: exchange / exchanged (DeviceFeed._exchange),
  parted (it has the layer's part: kept, or from the reader);
  host, the reader's thread: read (a part's read starts: it takes its
  pinned buffer from the pinning thread, or, before that thread was
  there, made it), pread (Pack.read_part called), readdone;
  GPU (CUDA events, when the stream reached them): copy (the feed's copy
  stream once the part is there, before its copy: its start), copied
  (after it: its end), gathered (the all-gather done, on a stream that
  waits for nothing else), decoded (the pager's decode into the slot
  done: provide_device makes the side stream wait for it; the side
  stream waits for the decode before too), ready (the forward's stream
  past the acquire: the layer may be used), done (the forward's stream
  at the release: the layer's work done).
The GPU's clock is put on the host's by one event synchronized at the
start (within tens of microseconds)."""
import json
import sys
import threading
import time

import torch


class Timeline:
    def __init__(self):
        self.on = False
        self.lock = threading.Lock()
        self.host = []     # (layer, what, perf_counter seconds)
        self.events = []   # (layer, what, torch.cuda.Event)

    def start(self, dev) -> None:
        torch.cuda.synchronize(dev)
        self.base = torch.cuda.Event(enable_timing=True)
        self.base.record()
        self.base.synchronize()
        self.t0 = time.perf_counter()
        self.host.clear()
        self.events.clear()
        self.on = True

    def at(self, layer: int, what: str) -> None:
        if self.on:
            with self.lock:
                self.host.append((layer, what, time.perf_counter()))

    def gpu(self, layer: int, what: str, stream=None) -> None:
        if self.on:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(stream)
            with self.lock:
                self.events.append((layer, what, ev))

    def dump(self, dev, path: str, stats=None) -> None:
        """Written to path, with `stats` (counts over the forwards)."""
        torch.cuda.synchronize(dev)
        self.on = False
        rows = [(l, w, (t - self.t0) * 1e3) for l, w, t in self.host]
        rows += [(l, w, self.base.elapsed_time(ev)) for l, w, ev in self.events]
        rows.sort(key=lambda r: r[2])
        with open(path, "w") as f:
            json.dump({"rows": rows, "stats": stats or {}}, f)


def install(tl: Timeline, feed):
    """Record tl's points from the feed's and the hooks' calls (`feed`'s
    thread and schedule hold their callables: patched on it); returns a
    function that puts everything back."""
    import torch.distributed as dist
    from wspager import _devfeed, _offload

    need, queue_, exchange = _devfeed.DeviceFeed.need, feed.schedule.issue, feed.issuer.run
    acquire, release = _offload.Offload.acquire, _offload.Offload.release
    all_gather = dist.all_gather
    current = {}   # the exchanges' thread: the feed and layer being exchanged

    def need_(self, layer):
        tl.at(layer, "need")
        need(self, layer)
        tl.at(layer, "needed")

    def queue__(self, layer):
        tl.at(layer, "queued")
        queue_(layer)

    def exchange_(self, layer):
        tl.at(layer, "exchange")
        current["at"] = (self, layer)
        exchange(layer)
        tl.gpu(layer, "copied", self.copy)
        tl.gpu(layer, "decoded", self.side)
        tl.at(layer, "exchanged")

    def all_gather_(*args, **kw):
        work = all_gather(*args, **kw)
        feed, layer = current.get("at", (None, None))
        if feed is not None and tl.on:
            # a stream of its own, which waits for nothing else: the
            # feed's side stream waits for the previous decode too
            if "stream" not in current:
                current["stream"] = torch.cuda.Stream(feed.dev)
            with torch.cuda.stream(current["stream"]):
                work.wait()
                tl.gpu(layer, "gathered", current["stream"])
        return work

    def acquire_(self, g, routed=False):
        acquire(self, g, routed)
        tl.at(g.index, "acquired")
        tl.gpu(g.index, "ready")

    def release_(self, g):
        tl.gpu(g.index, "done")
        release(self, g)
        tl.at(g.index, "released")

    part, read, read_part = feed._part, feed.reader.read, feed.pager.pack.read_part

    def part_(layer):   # the exchanges' thread has the part: its copy is next
        got = part(layer)
        tl.at(layer, "parted")
        tl.gpu(layer, "copy", feed.copy)
        return got

    def read_(layer):   # the reader's thread: the pinning thread's buffer taken, then the read
        tl.at(layer, "read")
        got = read(layer)
        tl.at(layer, "readdone")
        return got

    def read_part_(key, *args, **kw):
        tl.at(key, "pread")
        return read_part(key, *args, **kw)

    def undo():
        _devfeed.DeviceFeed.need = need
        feed.schedule.issue, feed.issuer.run = queue_, exchange
        del feed._part, feed.pager.pack.read_part   # the methods show again
        feed.reader.read = read
        _offload.Offload.acquire, _offload.Offload.release = acquire, release
        dist.all_gather = all_gather

    _devfeed.DeviceFeed.need = need_
    feed.schedule.issue = lambda layer: queue__(feed, layer)
    feed.issuer.run = lambda layer: exchange_(feed, layer)
    feed._part, feed.reader.read, feed.pager.pack.read_part = part_, read_, read_part_
    _offload.Offload.acquire, _offload.Offload.release = acquire_, release_
    dist.all_gather = all_gather_
    return undo


COUNTED = {"pager": ("acquires", "gpu_hits", "host_hits", "misses", "gpu_evictions",
                     "prefetch_wasted", "bytes_h2d", "bytes_read"),
           "feed": ("exchanges", "not_taken", "repeats")}


def counts(off):
    """The pager's and the feed's counts that record() reports."""
    got = {"pager": off.pager.stats(), "feed": off.feed.stats()}
    return {k: got[src][k] for src, keys in COUNTED.items() for k in keys}


def record(model, ids, off, path: str):
    """Two warm forwards of `model` (offloaded: `off` is its _wspager, with
    a DeviceFeed) on a timeline, after one more that warms the wrappers;
    the pager's and the feed's counts over the two.  Written to path and
    returned."""
    tl, dev = Timeline(), ids.device
    undo = install(tl, off.feed)
    with torch.no_grad():
        model(ids)
        before = counts(off)
        tl.start(dev)
        for _ in range(2):
            model(ids)
        torch.cuda.synchronize(dev)
        after = counts(off)
    tl.dump(dev, path, {k: after[k] - before[k] for k in after})
    undo()
    with open(path) as f:
        return json.load(f)


def summarize(saved) -> None:
    """Per layer of the last forward, and the means over all: the GPU's
    copy-stream use, and the lags between the points."""
    rows, by = saved["rows"], {}
    print("counts over the forwards: " + ", ".join(f"{k} {v}" for k, v in saved["stats"].items()))
    for layer, what, t in rows:
        by.setdefault(what, {}).setdefault(layer, []).append(t)
    end = max(t for _, _, t in rows)
    copies = sorted(zip(sorted(t for l in by.get("copy", {}).values() for t in l),
                        sorted(t for l in by.get("copied", {}).values() for t in l)))
    busy = sum(b - a for a, b in copies)
    print(f"{len(copies)} part copies, the copy stream busy {busy:.1f} of {end:.1f} ms "
          f"({busy / end:.0%})")

    def lag(a, b):
        """Mean of b - a over the layers and uses where both are."""
        d = [tb - ta for layer in by.get(a, {}) if layer in by.get(b, {})
             for ta, tb in zip(by[a][layer], by[b][layer])]
        return (sum(d) / len(d), min(d), max(d), len(d)) if d else None
    for a, b in (("read", "pread"), ("pread", "readdone"), ("exchange", "parted"),
                 ("queued", "exchange"), ("exchange", "exchanged"), ("copy", "copied"),
                 ("copied", "gathered"), ("gathered", "decoded"), ("decoded", "ready"),
                 ("ready", "done"), ("need", "needed"), ("needed", "acquired"),
                 ("queued", "copy"), ("acquired", "ready"), ("done", "released")):
        s = lag(a, b)
        if s:
            print(f"  {a:>9} -> {b:<9} mean {s[0]:7.2f} ms  min {s[1]:7.2f}  max {s[2]:7.2f}"
                  f"  ({s[3]})")
    print("the last forward, ms (layer: need queued exchange copy copied gathered decoded "
          "ready done):")
    last = {}
    for layer, what, t in rows:
        last.setdefault(layer, {})[what] = t
    for layer in sorted(last, key=lambda k: last[k].get("need", 1e9))[-20:]:
        pts = last[layer]
        print(f"  {layer:4d}: " + " ".join(
            f"{w[:4]}={pts[w]:7.2f}" for w in ("need", "queued", "exchange", "copy", "copied",
                                              "gathered", "decoded", "ready", "done")
            if w in pts))


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        summarize(json.load(f))
