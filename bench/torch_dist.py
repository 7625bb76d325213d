"""Data parallel over a process group against one process, in one run:
wspager.torch.from_pretrained(..., process_group=) on two ranks (NCCL, a
GPU each, one shared pack) against one process on one GPU.  Each is timed
cold (page cache dropped, nothing in the host tier: the first forward
reads the pack; with the group each rank reads half) and warm (forwards of
a few tokens back to back).  With GPU decode the ranks' parts meet on the
GPUs (each link carries half of every layer; the parts stay in pinned
host memory); else in the host tier.  Ceilings measured in the same run:
the pack read with one thread from a dropped page cache, pinned
host->GPU copies to each GPU, GPU->GPU copies (what the all-gathers
could move at most), and the same forwards with the model resident on
one GPU (the forward's own host time: a floor for any paging).  Rows:
the cold forward's seconds and GB/s of raw weights, the bytes each rank
read from the pack (the group's sum against the pack's stored size), the
warm GB/s per GPU against one process and against its link, and a warm
forward's time against the resident model's.  Logits of the ranks
against one process.

  python3 bench/torch_dist.py --dir /var/tmp/wsp-dist [--layers 16 --hidden 4096]
      [--gpu-slots N: each pager's slots]
      [--profile DIR: each rank's cold forward traced, DIR/dist-rankN.json,
       and two warm forwards, DIR/dist-rankN-warm.json, the feed's and the
       pager's calls named there: bench/cpu_time.py sums the host side]
  (drops the page cache: run as root, or the cold rows are warm and say so;
   WSP_DIST_STACKS=S: a rank still running after S seconds prints its
   threads' stacks and ends; WSP_DIST_SAMPLE=1: where the forward's thread
   was during the warm forwards, sampled (rank 0 and the one process);
   WSP_DIST_GPU_ONLY=1: --profile's warm traces without the host side,
   whose tracing slows the forward's thread more than the GPU;
   WSP_DIST_TIMELINE=1: each layer's points on one clock for the cold
   forward and two more warm ones, DIR/timeline-cold-rankN.json and
   DIR/timeline-rankN.json, summed in the log (bench/dist_timeline.py))
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import wspager  # noqa: E402
import wspager.torch as wt  # noqa: E402
from torch_devices import d2d, h2d  # noqa: E402
from torch_offload import drop_caches, llama_config, log, make_checkpoint, model_args  # noqa: E402


def read_rate(pack: str) -> float:
    """GB/s of reading every file of the pack once, one thread, 8 MiB reads."""
    total, t0 = 0, time.perf_counter()
    for name in sorted(os.listdir(pack)):
        with open(os.path.join(pack, name), "rb", buffering=0) as f:
            while True:
                b = f.read(8 << 20)
                if not b:
                    break
                total += len(b)
    return total / (time.perf_counter() - t0) / 1e9


def timed(model, ids, passes: int, reps: int, after_cold=lambda: None, trace=None,
          before_cold=lambda: None):
    """(cold forward seconds, median warm seconds of `passes` forwards, the
    last forward's logits, and (the forward's thread's share of the warm
    time on a CPU, the process's CPUs) in the median rep); before_cold()
    is called before the cold forward, after_cold() between the two.
    trace: a path, to record the
    cold forward's device activity there (torch.profiler, Chrome trace),
    and two warm forwards' in trace-warm.json beside it."""
    import contextlib
    from torch.profiler import ProfilerActivity, profile
    dev = ids.device
    with torch.no_grad():
        before_cold()
        with profile(activities=[ProfilerActivity.CUDA]) if trace else \
                contextlib.nullcontext() as prof:
            t0 = time.perf_counter()
            out = model(ids).logits
            torch.cuda.synchronize(dev)
            cold = time.perf_counter() - t0
        if trace:
            prof.export_chrome_trace(trace)
        after_cold()
        log(f"cold forward {cold:.2f} s")
        for _ in range(2):
            model(ids)
        # who decodes is measured while running (wsp_who_decodes): forwards,
        # each waited for, until the pager has chosen, so that no timed pass
        # is a trial's (a rank's parts are always decoded on its GPU)
        pager = getattr(getattr(model, "_wspager", None), "pager", None)
        n = 0
        while pager is not None and pager.who_decodes() == "trying" and n < 200:
            model(ids)
            torch.cuda.synchronize(dev)
            n += 1
        if trace:
            acts = [ProfilerActivity.CUDA] + \
                ([] if os.environ.get("WSP_DIST_GPU_ONLY") else [ProfilerActivity.CPU])
            with profile(activities=acts) as prof:
                for _ in range(2):
                    model(ids)
                torch.cuda.synchronize(dev)
            prof.export_chrome_trace(trace.replace(".json", "-warm.json"))
        sampler = StackSampler() if os.environ.get("WSP_DIST_SAMPLE") else None
        times, busy = [], []
        for _ in range(reps):
            torch.cuda.synchronize(dev)
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            for _ in range(passes):
                out = model(ids).logits
            c1, p1 = time.thread_time(), time.process_time()
            torch.cuda.synchronize(dev)
            times.append(time.perf_counter() - t0)
            busy.append(((c1 - c0) / times[-1], (p1 - p0) / times[-1]))
    busy_median = busy[times.index(statistics.median(times))] if reps % 2 else busy[0]
    if sampler is not None and os.environ.get("RANK", "0") == "0":
        log("where the forward's thread was during the warm forwards:")
        sampler.report()
    elif sampler is not None:
        sampler.stop.set()
    return cold, statistics.median(times), out.float().cpu(), busy_median


def annotate_spans() -> None:
    """Name the feed's and the pager's calls in a torch.profiler trace
    (bench/cpu_time.py sums them): the C calls are invisible there else."""
    from torch.profiler import record_function
    from wspager import _devfeed, _offload

    def wrap(cls, name):
        inner = getattr(cls, name)

        def spanned(*args, **kw):
            with record_function(f"wspager.{cls.__name__}.{name}"):
                return inner(*args, **kw)
        setattr(cls, name, spanned)
    for cls, name in ((_devfeed.DeviceFeed, "need"), (_devfeed.DeviceFeed, "_exchange"),
                      (_devfeed.DeviceFeed, "_part"), (wspager.Pager, "acquire"),
                      (wspager.Pager, "provide_device"), (wspager.AcquiredLayer, "release"),
                      (_offload.Offload, "release"),
                      (_offload.Offload, "acquire")):
        wrap(cls, name)


class StackSampler:
    """WSP_DIST_SAMPLE=1: where the forward's thread is, sampled every half
    millisecond from a thread of its own during the warm forwards (Python
    frames: a C call shows as the line that made it).  Cheap enough not to
    change what it measures, unlike a tracing profiler."""

    def __init__(self):
        import collections
        import threading
        self.tid, self.counts = threading.get_ident(), collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            f = sys._current_frames().get(self.tid)
            where = []
            while f is not None and len(where) < 2:
                code = f.f_code
                where.append(f"{os.path.basename(code.co_filename)}:{f.f_lineno} {code.co_name}")
                f = f.f_back
            self.counts[" < ".join(where)] += 1
            time.sleep(0.0005)

    def report(self, top: int = 14) -> None:
        self.stop.set()
        self.thread.join()
        total = sum(self.counts.values())
        for where, n in self.counts.most_common(top):
            log(f"  {n / total:6.1%}  {where}")


def rank_main(a) -> None:
    import faulthandler
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    if os.environ.get("WSP_DIST_STACKS"):   # a rank still running after that many
        faulthandler.dump_traceback_later(float(os.environ["WSP_DIST_STACKS"]), exit=True)
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl")
    ids = torch.randint(0, a.vocab, (1, a.tokens), generator=torch.Generator().manual_seed(3))
    ids = ids.to(dev)
    # transformers imports a model's modules at its first use, seconds in a
    # fresh process; the one process had them from making the checkpoint
    import transformers
    import transformers.models.llama.modeling_llama  # noqa: F401
    transformers.AutoConfig.from_pretrained(a.ck)
    if a.profile:
        annotate_spans()
    dist.barrier()
    t_open = time.perf_counter()
    model = wt.from_pretrained(a.pack, config=a.ck, device=dev, host_cache=a.host_cache,
                               gpu_slots=a.gpu_slots,
                               process_group=dist.group.WORLD)
    opened = time.perf_counter() - t_open
    log(f"rank {rank}: open {opened:.2f} s, feed {type(model._wspager.feed).__name__}")
    dist.barrier()
    off = model._wspager
    at_cold = {}

    tl = None   # the cold forward's timeline (WSP_DIST_TIMELINE, DeviceFeed)
    if os.environ.get("WSP_DIST_TIMELINE") and hasattr(off.feed, "issuer"):
        import dist_timeline
        tl = dist_timeline.Timeline()
        undo = dist_timeline.install(tl, off.feed)

    def after_cold():   # where the cold pass spent its time, before warm passes add to it
        st = off.pager.stats()
        at_cold.update(off.feed.stats(), acquire_block_s=st["acquire_block_ns"] / 1e9)
        if tl is not None:
            path = os.path.join(a.dir, f"timeline-cold-rank{rank}.json")
            tl.dump(dev, path, dist_timeline.counts(off))
            undo()   # the timed forwards run as without it
            if rank == 0:
                log("the cold forward's timeline:")
                with open(path) as f:
                    dist_timeline.summarize(json.load(f))
    trace = os.path.join(a.profile, f"dist-rank{rank}.json") if a.profile else None
    cold, warm, out, busy = timed(model, ids, a.passes, a.reps, after_cold, trace,
                                  before_cold=lambda: tl and tl.start(dev))
    log(f"rank {rank}: cold {cold:.2f} s, warm {warm:.2f} s for {a.passes} passes")
    if tl is not None:
        path = os.path.join(a.dir, f"timeline-rank{rank}.json")
        saved = dist_timeline.record(model, ids, off, path)
        if rank == 0:
            log("two warm forwards' timeline:")
            dist_timeline.summarize(saved)
    res = {"rank": rank, "open_s": opened, "cold_s": cold, "warm_s": warm,
           "thread_busy": busy[0], "process_busy": busy[1],
           "pager_bytes_read": off.pager.stats()["bytes_read"], **at_cold}
    torch.save(out, os.path.join(a.dir, f"logits-{rank}.pt"))
    json.dump(res, open(os.path.join(a.dir, f"dist-{rank}.json"), "w"))
    wt.remove(model)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    model_args(ap, "/var/tmp/wsp-dist", tokens=16)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--host-cache", default="16G")
    ap.add_argument("--gpu-slots", type=int, default=None, help="each pager's (default: its own)")
    ap.add_argument("--profile", metavar="DIR",
                    help="trace each rank's cold forward (torch.profiler) into DIR")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pack", help=argparse.SUPPRESS)
    ap.add_argument("--ck", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank:
        return rank_main(a)
    if torch.cuda.device_count() < 2:
        log("torch_dist: fewer than two CUDA devices")
        sys.exit(77)
    os.makedirs(a.dir, exist_ok=True)
    cfg = llama_config(a.layers, a.hidden, a.intermediate, a.vocab)
    ck = os.path.join(a.dir, "llama")
    make_checkpoint(ck, cfg)
    pack = ck + ".wsp"
    if not os.path.exists(os.path.join(pack, "manifest.wspm")):
        wspager.convert(ck, pack, force=True)
    with wspager.Pack(pack) as pk:
        raw, stored = pk.summary["raw_bytes"], pk.summary["stored_bytes"]
    dropped = drop_caches()
    disk = read_rate(pack)
    link = [h2d([torch.device("cuda", k)]) for k in range(2)]
    peer = d2d(torch.device("cuda", 0), torch.device("cuda", 1))
    log(f"weights {raw / 1e9:.2f} GB raw, {stored / 1e9:.2f} GB stored; "
        f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}")
    log(f"ceilings: pack read cold, one thread {disk:.2f} GB/s stored"
        f"{'' if dropped else ' (page cache NOT dropped: not root)'}; pinned host->GPU "
        f"{link[0]:.1f} / {link[1]:.1f} GB/s; GPU->GPU {peer:.1f} GB/s")

    # One process, one GPU
    drop_caches()
    ids = torch.randint(0, a.vocab, (1, a.tokens), generator=torch.Generator().manual_seed(3))
    ids = ids.to("cuda:0")
    t0 = time.perf_counter()
    model = wt.from_pretrained(pack, config=ck, device="cuda:0", host_cache=a.host_cache,
                               gpu_slots=a.gpu_slots)
    opened = time.perf_counter() - t0
    cold, warm, want, one_busy = timed(model, ids, a.passes, a.reps)
    read1 = model._wspager.pager.stats()["bytes_read"]
    decoder = model._wspager.pager.who_decodes()
    wt.remove(model)
    del model
    torch.cuda.empty_cache()
    log(f"one process: open {opened:.2f} s, cold forward {cold:.2f} s = {raw / cold / 1e9:.2f} "
        f"GB/s raw ({stored / cold / 1e9:.2f} GB/s stored; read {read1 / stored:.2f}x the pack); "
        f"warm {a.passes * raw / warm / 1e9:.1f} GB/s raw = "
        f"{a.passes * raw / warm / 1e9 / link[0]:.2f}x the link (decoded by: {decoder}); "
        f"its thread on a CPU "
        f"{one_busy[0]:.0%} of the warm time")

    # The same forwards with the model resident on one GPU: no paging at
    # all, so what is left is the forward's own host time (a floor)
    import transformers
    res_model = transformers.AutoModelForCausalLM.from_pretrained(
        ck, dtype=torch.bfloat16).eval().to("cuda:0")
    _, res_warm, _, res_busy = timed(res_model, ids, a.passes, a.reps)
    del res_model
    torch.cuda.empty_cache()
    log(f"resident on one GPU: its thread on a CPU {res_busy[0]:.0%} of the time; "
        f"a forward {res_warm / a.passes * 1e3:.1f} ms "
        f"(= {a.passes * raw / res_warm / 1e9:.1f} GB/s of weights if they had to come)")

    # Two ranks, NCCL, the same pack
    drop_caches()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    argv = [sys.executable, __file__, "--rank", "--pack", pack, "--ck", ck, "--dir", a.dir,
            "--vocab", str(a.vocab), "--tokens", str(a.tokens), "--passes", str(a.passes),
            "--reps", str(a.reps), "--host-cache", a.host_cache]
    if a.gpu_slots:
        argv += ["--gpu-slots", str(a.gpu_slots)]
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
        argv += ["--profile", a.profile]
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r))) for r in range(2)]
    for p in procs:
        p.wait(timeout=900)
    res = [json.load(open(os.path.join(a.dir, f"dist-{r}.json"))) for r in range(2)]
    group_read = sum(r["bytes_read"] + r["pager_bytes_read"] for r in res)
    one_warm = a.passes * raw / warm / 1e9
    for r in res:
        got = torch.load(os.path.join(a.dir, f"logits-{r['rank']}.pt"))
        per_gpu = a.passes * raw / r["warm_s"] / 1e9
        how = "the GPUs (parts all-gathered, decoded there)" if r.get("device") else \
            "the host tier (whole layers over each link)"
        log(f"rank {r['rank']}: a warm forward {r['warm_s'] / a.passes * 1e3:.1f} ms "
            f"({r['warm_s'] / res_warm:.2f}x the resident model's); the forward's thread on "
            f"a CPU {r['thread_busy']:.0%} of it, the process's threads "
            f"{r['process_busy']:.2f} CPUs")
        log(f"rank {r['rank']}: layers meet on {how}; open {r['open_s']:.2f} s, cold forward "
            f"{r['cold_s']:.2f} s = {raw / r['cold_s'] / 1e9:.2f} GB/s raw "
            f"({cold / r['cold_s']:.2f}x one process); read {r['bytes_read'] / stored:.2f}x the "
            f"pack itself (+{r['pager_bytes_read']} by its pager); warm {per_gpu:.1f} GB/s raw "
            f"= {per_gpu / one_warm:.2f}x one process, {per_gpu / link[r['rank']]:.2f}x its "
            f"link; logits identical: {torch.equal(got, want)}")
        if r.get("device"):   # the exchanges have a thread of their own
            feed = (f"the forward's thread waited {r['need_s']:.2f} s for exchanges, the "
                    f"exchanges' thread {r['share_wait_s']:.2f} s for parts")
        else:
            feed = (f"the forward's thread {r['need_s']:.2f} s in the feed, of which it waited "
                    f"{r['share_wait_s']:.2f} s for shares and {r['exchange_wait_s']:.2f} s for "
                    f"exchanges; {r['provide_s']:.2f} s handing them to the pager (a thread)")
        log(f"rank {r['rank']}, cold pass: reading its parts {r['read_s']:.2f} s (a thread); "
            f"{feed}; {r['acquire_block_s']:.2f} s in acquires")
    log(f"the group read {group_read / stored:.3f}x the pack's stored bytes in its cold pass")


if __name__ == "__main__":
    main()
