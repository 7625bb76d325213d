"""Training through the pager on one GPU: forward and backward of a Llama
whose weights stream through wspager (train=True, the host cache holding
the model), its gradients leaving on the pager's write-back stream, against
the same model resident on the GPU (gradients zeroed before each step, as
a training loop does); then one step over the fp32 host masters with
torch's AdamW, the library's (wspager.torch.AdamW) and, where installed,
DeepSpeed's CPU Adam (ZeRO-Offload's); then whole
training steps with the step on the GPU inside the backward
(wspager.torch.step_in_backward); or, with --lora, LoRA fine-tuning (peft)
over the frozen model, resident against paged.  Who decodes packed layers
is the pager's choice, measured while running (--decode auto: the bench
runs untimed steps until it has chosen, and prints the choice and the
pager's figures; with --trials N, it makes the choice N times, starting
it again each time, and counts the choices), or fixed (--decode gpu /
host).  Printed: seconds per forward+backward; the bytes the link carried
(weights in: forward and backward each acquire every layer; gradients out)
from the pager's counters; the time those bytes need at the pinned
host->GPU and GPU->host bandwidths measured in the same run; and the step's
efficiency: max(compute, transfer in, transfer out) / step time, where
compute is the resident model's forward+backward.  From the pager's trace
(the device times of every gradient push's copies) and CUDA events around
each timed step's backward: the share of the gradient copies' time that
ran while the backward computed, and how long the GPU waited: (paged step -
resident step) / paged step, with whether compute was >= 1.2x the step's
transfer (the condition under which that wait should be small; raise
--batch to get there).

With --lora --interleave, resident and paged steps take turns, both models
on the GPU, and each pair's ratio is reported: the host's speed drifts by
tens of percent between runs on a shared machine, more than the paged
step's margin, and a pair of steps sees the same drift.  Without --lora,
--interleave keeps the resident model and ends with pairs of
forward+backward taking turns, the same way: the GPU's clock drifts with
its power and temperature by as much as the paged step's margin between
the resident steps (timed first) and the paged ones.

With --accumulate, forward+backward of micro-batches that add into the
last ones' gradients (gradient accumulation's later micro-batches: no
zeroing between them) too, against the resident model adding into its
own .grad in the same run.

With --profile DIR, one more step of each (resident, paged) runs under
torch.profiler; their device timelines go to DIR as Chrome traces and are
summarised (bench/cuda_timeline.py): where the compute stream sat idle,
and what ran beside it; and one more step inside the backward, with the
pager's fills and, on the host, when each layer's state copies and step
were issued.  The step inside the backward is measured against moving
its bytes in and out at once (both directions measured together in the
same run), each step synchronised and then several back to back, as a
training loop runs them; --device-step-only runs only it.

  python3 bench/torch_train.py --dir /var/tmp/wsp-train [--layers 8 --hidden 4096 --batch 4]
"""
import argparse
import functools
import os
import statistics
import sys
import time
from typing import Optional

import torch
import transformers

import cuda_timeline

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import wspager.torch as wt  # noqa: E402
from torch_offload import make_checkpoint  # noqa: E402


def ceilings(nbytes: int = 1 << 30):
    """Median GB/s of 1 GiB pinned copies, host->GPU and GPU->host, each
    alone; then both at once on two streams ("h2d both", "d2h both": each
    direction's rate while the other runs), which is what a step that
    moves state in and out at the same time can reach."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).fill_(1)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    out = {}
    for name, (dst, src) in {"h2d": (dev, host), "d2h": (host, dev)}.items():
        ts = []
        for _ in range(6):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        out[name] = nbytes / statistics.median(ts[1:]) / 1e9
    host2 = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev2 = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    streams = {"h2d both": (dev, host), "d2h both": (host2, dev2)}
    ts = {k: [] for k in streams}
    side = {k: torch.cuda.Stream() for k in streams}
    for _ in range(6):
        torch.cuda.synchronize()
        marks = {}
        for k, (dst, src) in streams.items():
            with torch.cuda.stream(side[k]):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                dst.copy_(src, non_blocking=True)
                b.record()
                marks[k] = (a, b)
        torch.cuda.synchronize()
        for k, (a, b) in marks.items():
            ts[k].append(a.elapsed_time(b) / 1e3)
    for k in streams:
        out[k] = nbytes / statistics.median(ts[k][1:]) / 1e9
    return out


def step_time(model, batches, reps: int = 3, before=None, phases=None) -> float:
    """Median seconds of forward+backward (after one warm-up), synchronised;
    `before` runs untimed before each (zeroing the gradients); `phases`, a
    list, gets each timed step's (forward, backward) seconds on the device."""
    ts = []
    for i in range(reps + 1):
        ids = batches[i % len(batches)]
        if before:
            before()
        torch.cuda.synchronize()
        e0, b0, b1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0 = time.perf_counter()
        e0.record()
        loss = model(ids, labels=ids).loss
        b0.record()
        loss.backward()
        b1.record()
        torch.cuda.synchronize()
        if i:
            ts.append(time.perf_counter() - t0)
            if phases is not None:
                phases.append((e0.elapsed_time(b0) / 1e3, b0.elapsed_time(b1) / 1e3))
    return statistics.median(ts)


def phase_medians(phases) -> str:
    """"forward X ms, backward Y ms": medians of step_time's phases."""
    return (f"forward {statistics.median(f for f, _ in phases) * 1e3:.1f} ms, backward "
            f"{statistics.median(b for _, b in phases) * 1e3:.1f} ms")


def profiled_step(model, ids, before, path: str):
    """One forward+backward under torch.profiler (device activity and the
    CUDA calls only: recording every operator would slow the host that
    launches the work), its trace written to `path` + ".gz"; returns
    cuda_timeline's summary of it."""
    import gzip
    import shutil
    from torch.profiler import ProfilerActivity, profile
    before()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model(ids, labels=ids).loss.backward()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(path)
    return cuda_timeline.summarize(cuda_timeline.load(path + ".gz", calls=True))


class Timeline:
    """The pager's trace events and CUDA events of the timed steps, on one
    clock: an event recorded on the idle device is read against
    time.monotonic_ns() (the clock the library's events use), and every
    later CUDA event is placed from it (to within the ~10 us of a sync)."""

    def __init__(self):
        self.events = []    # (stage, layer, begin_ns, end_ns, bytes), library threads
        self.windows = []   # (backward begin, backward end) per timed step
        self.phases = []    # (forward, backward) seconds per timed step, as step_time's
        self.ends = []      # seconds the trainer's end of each timed backward took
        self.tails = []     # (device ms from the backward's last kernel to its end,
                            #  gradient bytes the trace shows landing after that kernel)
        self.widened = []   # gradient elements widened on the host, each timed step

    def trace(self, *ev):
        self.events.append(ev)

    def in_backward(self, stage: str) -> float:
        """Bytes the copies of `stage` moved inside the backward windows (an
        event's bytes split by its time inside)."""
        moved = 0.0
        for st, _, b, e, nbytes in self.events:
            if st != stage or e <= b:
                continue
            inside = sum(max(0, min(e, we) - max(b, wb)) for wb, we in self.windows)
            moved += nbytes * inside / (e - b)
        return moved

    def d2h_overlap(self):
        """Share of the gradient copies' time inside a backward window."""
        total = inside = 0
        for stage, _, b, e, _ in self.events:
            if stage != "d2h" or not self.windows:
                continue
            total += e - b
            inside += sum(max(0, min(e, we) - max(b, wb)) for wb, we in self.windows)
        return inside / total if total else float("nan"), total


def choose_decoder(model, batches, notices, most: int = 200) -> str:
    """Steps (forward+backward, gradients zeroed) until the pager has chosen
    who decodes (wsp_who_decodes(3)); prints the choice, how long it took
    and the pager's notices with its figures; returns the choice."""
    pg = model._wspager.pager
    t0, n, seen = time.perf_counter(), 0, len(notices)
    while pg.who_decodes() == "trying" and n < most:
        wt.zero_grad(model)
        model(batches[n % len(batches)], labels=batches[n % len(batches)]).loss.backward()
        torch.cuda.synchronize()
        n += 1
    wt.grads(model)
    who = pg.who_decodes()
    print(f"decode: {who} ({'the link carries raw weights' if who == 'host' else 'the link carries packed layers'})"
          + (f", chosen after {n} more steps, {time.perf_counter() - t0:.1f} s" if n else ""))
    for msg in notices[seen:]:
        if "who decodes" in msg:
            print(f"  {msg}")
    return who


def trials(model, batches, notices, n: int) -> None:
    """The pager's choice of who decodes made n - 1 more times
    (wsp_reset_prediction(3) starts it again, the raw copies dropped): how
    often it chooses each way in this workload, one model load for all."""
    chosen = []
    for _ in range(n - 1):
        model._wspager.pager.reset_prediction()
        chosen.append(choose_decoder(model, batches, notices))
    print(f"the choice made {n - 1} more times: " +
          ", ".join(f"{who} {chosen.count(who)}" for who in sorted(set(chosen))))


def traced_steps(model, batches, reps, before, tl: Timeline):
    """step_time, with each step's backward (the warm-up's too: its
    gradients are traced as well) placed on the host clock; returns the
    median and every timed step's seconds.  A CUDA event recorded where the
    trainer's end of the backward begins marks the backward's last kernel:
    from it to the backward's end the device only waits for gradients."""
    ts = []
    tr = model._wspager.trainer
    last_kernel = []
    end_backward = tr._end_backward

    def marked_end():
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        last_kernel.append(ev)
        end_backward()
    tr._end_backward = marked_end   # queued by the trainer at the backward's first hook
    for i in range(reps + 1):
        ids = batches[i % len(batches)]
        before()
        torch.cuda.synchronize()
        e0, b0, b1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        e0.record()
        e0.synchronize()
        t0_ns = time.monotonic_ns()
        t0 = time.perf_counter()
        loss = model(ids, labels=ids).loss
        b0.record()
        loss.backward()
        b1.record()
        torch.cuda.synchronize()
        if i:
            ts.append(time.perf_counter() - t0)
            tl.phases.append((e0.elapsed_time(b0) / 1e3, b0.elapsed_time(b1) / 1e3))
            tl.ends.append(tr.end_seconds)
            tl.widened.append(tr.split.elements - tr.split.f32)
            k_ns = t0_ns + int(e0.elapsed_time(last_kernel[-1]) * 1e6)
            late = sum(nb * (e - max(b, k_ns)) / (e - b) for st, _, b, e, nb in tl.events
                       if st == "d2h" and e > k_ns and e > b)
            tl.tails.append((last_kernel[-1].elapsed_time(b1), late))
        tl.windows.append((t0_ns + int(e0.elapsed_time(b0) * 1e6),
                           t0_ns + int(e0.elapsed_time(b1) * 1e6)))
    tr._end_backward = end_backward
    return statistics.median(ts), ts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/wsp-train")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--host-cache", default="16G")
    ap.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16",
                    help="the checkpoint's dtype, and so the gradients' (float16: with "
                         "--fwd-bwd-only)")
    ap.add_argument("--reps", type=int, default=3, help="timed paged steps (median)")
    ap.add_argument("--gpu-slots", type=int, default=4, help="the pager's GPU slots")
    ap.add_argument("--gpu-packed", default=None, metavar="SIZE",
                    help="with --lora: a GPU tier of packed layers of SIZE (wsp_options."
                         "gpu_packed_bytes; default none)")
    ap.add_argument("--no-keep-small", dest="keep_small", action="store_false",
                    help="with --lora: page the small layers too (the final norm; "
                         "offload's keep_small=False)")
    ap.add_argument("--state-cache", default="24G",
                    help="the pager's memory for masters and optimizer state (step_in_backward)")
    ap.add_argument("--profile", metavar="DIR",
                    help="profile a step of each; traces to DIR (device activity; with "
                         "WSP_PROFILE_CPU=1 the host's operators and CUDA calls too)")
    ap.add_argument("--decode", choices=("auto", "gpu", "host"), default="auto",
                    help="who decodes packed layers: measured while running (auto, the "
                         "default: the bench runs steps until the pager has chosen), the GPU "
                         "(host_decode=False) or the host, the link carrying raw weights "
                         "(host_decode=True)")
    ap.add_argument("--host-decode", dest="decode", action="store_const", const="host",
                    help="as --decode host")
    ap.add_argument("--lora", action="store_true",
                    help="only LoRA fine-tuning (peft adapters over the frozen model), paged "
                         "against resident, whole steps")
    ap.add_argument("--trials", type=int, default=1, metavar="N",
                    help="full training: make the pager's choice of who decodes N times "
                         "(wsp_reset_prediction between), to see how steady it is; the "
                         "figures after are the last choice's")
    ap.add_argument("--interleave", action="store_true",
                    help="resident and paged steps taking turns, both models on the GPU at "
                         "once (the host's and the GPU's speed drift during a run; pairs of "
                         "steps see the same drift): with --lora its steps; else, after the "
                         "other figures, 2 x --reps pairs of forward+backward")
    ap.add_argument("--accumulate", action="store_true",
                    help="also time micro-batches that add into the last ones' gradients "
                         "(gradient accumulation: no zeroing between them), paged against "
                         "resident")
    ap.add_argument("--fwd-bwd-only", action="store_true",
                    help="only the forward+backward figures (no optimizer steps)")
    ap.add_argument("--device-step-only", action="store_true",
                    help="only the step inside the backward (wt.step_in_backward)")
    a = ap.parse_args()
    if a.dtype != "bfloat16" and (not a.fwd_bwd_only or a.lora or a.device_step_only):
        ap.error("--dtype float16 times full training's forward+backward only: "
                 "--fwd-bwd-only, without --lora or --device-step-only")
    a.host_decode = {"auto": None, "gpu": False, "host": True}[a.decode]
    torch.manual_seed(0)
    dtype = getattr(torch, a.dtype)
    d = os.path.join(a.dir, f"llama-{a.layers}x{a.hidden}"
                     + ("" if dtype == torch.bfloat16 else f"-{a.dtype}"))
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=a.hidden,
                                   intermediate_size=a.hidden * 11008 // 4096,
                                   num_hidden_layers=a.layers, num_attention_heads=a.hidden // 128,
                                   num_key_value_heads=max(1, a.hidden // 512),
                                   max_position_embeddings=4096)
    make_checkpoint(d, cfg, dtype)
    ceil = ceilings()
    print(f"{torch.cuda.get_device_name()}; pinned host->GPU {ceil['h2d']:.1f} GB/s, "
          f"GPU->host {ceil['d2h']:.1f} GB/s; both at once {ceil['h2d both']:.1f} in + "
          f"{ceil['d2h both']:.1f} GB/s out; torch {torch.__version__}")
    batches = [torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda") for _ in range(2)]
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
    if a.lora:
        return lora_steps(d, a, batches, ceil)
    if a.device_step_only:
        return device_step(d, a, batches, ceil)

    # Resident: the compute the paged steps overlap with.
    ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=dtype).cuda()
    weight_bytes = sum(p.numel() * p.element_size() for p in ref.parameters())
    res_phases = []
    t_res = step_time(ref, batches, before=ref.zero_grad,   # set_to_none, as a loop does
                      phases=res_phases)
    res_acc = None
    if a.accumulate:   # .grad kept: each backward adds into it
        res_acc = step_time(ref, batches, reps=a.reps)
        ref.zero_grad()
    ref_prof = None
    if a.profile:
        ref_prof = profiled_step(ref, batches[0], ref.zero_grad,
                                 os.path.join(a.profile, f"train-resident-b{a.batch}.json"))
    if not a.interleave:   # else kept for the pairs at the end
        del ref
        ref = None
        torch.cuda.empty_cache()
    print(f"weights {weight_bytes / 1e9:.2f} GB {a.dtype}, {a.batch}x{a.seq} tokens; resident "
          f"forward+backward {t_res * 1e3:.1f} ms ({phase_medians(res_phases)})")

    tl = Timeline()
    notices = []
    model = wt.from_pretrained(d, device="cuda", host_cache=a.host_cache, gpu_slots=a.gpu_slots, train=True,
                               trace=tl.trace, host_decode=a.host_decode, log=notices.append)
    pg = model._wspager.pager
    step_time(model, batches, reps=1)   # fills the host cache
    choose_decoder(model, batches, notices)
    if a.trials > 1:
        trials(model, batches, notices, a.trials)
    wt.zero_grad(model)
    wt.grads(model)
    pg.reset_stats()
    tl.events.clear()
    reps = a.reps
    t_pag, t_all = traced_steps(model, batches, reps, lambda: wt.zero_grad(model), tl)
    wt.grads(model)   # every gradient copy and addition done
    st = pg.stats()
    share, d2h_ns = tl.d2h_overlap()   # before the profiled step adds its own
    if a.profile:
        prof = profiled_step(model, batches[0], lambda: wt.zero_grad(model),
                             os.path.join(a.profile, f"train-paged-b{a.batch}"
                                          f"-{pg.who_decodes()}.json"))
        wt.grads(model)
    # The counters include the warm-up step of step_time: reps + 1 steps.
    h2d, d2h = st["bytes_h2d"] / (reps + 1), st["bytes_d2h"] / (reps + 1)
    t_in, t_out = h2d / ceil["h2d"] / 1e9, d2h / ceil["d2h"] / 1e9
    bound = max(t_res, t_in, t_out)
    print(f"paged forward+backward {t_pag * 1e3:.1f} ms (median of {reps}: "
          f"{', '.join(f'{t * 1e3:.1f}' for t in t_all)}); {phase_medians(tl.phases)}, of "
          f"which the end (waiting for the gradients, binding them) "
          f"{statistics.median(tl.ends) * 1e3:.1f} ms")
    tail_ms, tail_bytes = (statistics.median(x) for x in zip(*tl.tails))
    print(f"  after the backward's last kernel the device waited {tail_ms:.1f} ms for its "
          f"gradients, {tail_bytes / 1e9:.2f} GB of their copies still landing (medians)")
    print(f"  weights in {h2d / 1e9:.2f} GB "
          f"({t_in * 1e3:.1f} ms at the link), gradients out {d2h / 1e9:.2f} GB "
          f"({t_out * 1e3:.1f} ms at the link), compute {t_res * 1e3:.1f} ms")
    split = model._wspager.trainer.split
    print(f"  host time applying gradients (adding into fp32; through the ring, their copies "
          f"too): {st['grad_add_ns'] / (reps + 1) / 1e6:.1f} ms "
          f"per step; share of gradient elements sent as fp32 "
          f"{split.share:.2f} ({'fixed' if split.fixed is not None else 'measured'})")
    print(f"  efficiency max(compute, in, out) / step = {bound / t_pag:.3f}; "
          f"{h2d / t_pag / 1e9:.1f} GB/s in = {h2d / t_pag / 1e9 / ceil['h2d']:.3f} of pinned "
          f"host->GPU; slowdown against resident {t_pag / t_res:.2f}x")
    print(f"  gradient copies (trace, {reps + 1} steps): {d2h_ns / (reps + 1) / 1e6:.1f} ms a step on the "
          f"write-back stream, {share * 100:.1f}% of it during the backward")
    # Host memory in the backward: what the copies read (weights) and
    # write (gradients), and the widening (2 B read and 4 B written an
    # element, streaming stores); against adamw_bench's widening alone.
    # Gradients widened as they land through the ring are read back from
    # the CPU's cache, and their copies' writes mostly stay there: for
    # those the figure counts bytes that never reach memory.
    steps = reps + 1
    h2d_b, d2h_b = tl.in_backward("h2d") / steps, tl.in_backward("d2h") / steps
    widen_b = statistics.median(tl.widened) * 6
    t_bwd = statistics.median(b for _, b in tl.phases)
    total = h2d_b + d2h_b + widen_b
    print(f"  host memory in the backward: weights read by the link {h2d_b / 1e9:.2f} GB, gradients "
          f"written by it {d2h_b / 1e9:.2f} GB, widening {widen_b / 1e9:.2f} GB; {total / 1e9:.2f} GB "
          f"in {t_bwd * 1e3:.1f} ms = {total / t_bwd / 1e9:.1f} GB/s (as if landed whole)")
    heavy = t_res >= 1.2 * max(t_in, t_out)
    print(f"  GPU waited (paged - resident) / paged = {(t_pag - t_res) / t_pag * 100:.1f}% of the "
          f"step; compute {t_res * 1e3:.1f} ms is {t_res / max(t_in, t_out):.2f}x the step's "
          f"transfer ({'>=' if heavy else '<'} 1.2x)")
    # The step's floor phase by phase: the forward's weights come in before
    # any of its gradients can go out, so the link's two directions overlap
    # only inside the backward.  Each phase takes at least its resident
    # compute and its bytes at the link (the backward's at the rates
    # measured with both directions busy).
    fwd_res = statistics.median(f for f, _ in res_phases)
    bwd_res = statistics.median(b for _, b in res_phases)
    fwd_in = h2d - h2d_b
    floor_f = max(fwd_res, fwd_in / ceil["h2d"] / 1e9)
    floor_b = max(bwd_res, h2d_b / ceil["h2d both"] / 1e9, d2h / ceil["d2h both"] / 1e9)
    floor = floor_f + floor_b
    print(f"  floor phase by phase {floor * 1e3:.1f} ms (forward {floor_f * 1e3:.1f}: compute "
          f"{fwd_res * 1e3:.1f} or {fwd_in / 1e9:.2f} GB in; backward {floor_b * 1e3:.1f}: compute "
          f"{bwd_res * 1e3:.1f}, {h2d_b / 1e9:.2f} GB in or {d2h / 1e9:.2f} GB out, both directions "
          f"busy); the step is {t_pag / floor:.3f}x it, the GPU waited "
          f"{(t_pag - floor) / t_pag * 100:.1f}% beyond it")

    if a.accumulate:
        accumulating(model, batches, a.reps, res_acc)
    if a.profile:
        print(cuda_timeline.report(prof, ref_prof))
    if ref is not None:
        interleaved(ref, model, batches, a.reps)
        del ref
        torch.cuda.empty_cache()
    if a.fwd_bwd_only:
        return

    n = sum(p.numel() for p in wt.parameters(model))
    # torch's fused CPU AdamW is what torchao's CPUOffloadOptimizer steps its
    # CPU copies with (its default for AdamW); DeepSpeed's CPU Adam is
    # ZeRO-Offload's step, where the package is installed (its op builds
    # when first used).  All with torch.optim.AdamW's defaults.
    steppers = [("torch.optim.AdamW", torch.optim.AdamW),
                ("torch.optim.AdamW(fused=True), torchao's CPU-offload step",
                 functools.partial(torch.optim.AdamW, fused=True)),
                ("wspager.torch.AdamW", wt.AdamW)]
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        steppers.append(("deepspeed.ops.adam.DeepSpeedCPUAdam, ZeRO-Offload's step",
                         functools.partial(DeepSpeedCPUAdam, adamw_mode=True,
                                           weight_decay=1e-2)))
    except ImportError as e:
        print(f"DeepSpeed's CPU Adam: not installed ({e})")
    for name, cls in steppers:
        opt = cls(wt.parameters(model), lr=1e-5)
        t_step = []
        for _ in range(2):   # the first makes the state; the second is every later step
            t0 = time.perf_counter()
            opt.step()
            t_step.append(time.perf_counter() - t0)
        print(f"{name} over the fp32 host masters ({n / 1e9:.2f} G parameters), with the "
              f"update of every layer: first step {t_step[0]:.2f} s, second {t_step[1]:.2f} s "
              f"({28 * n / t_step[1] / 1e9:.1f} GB/s of AdamW's 28 B a parameter)")
        del opt
    wt.remove(model)
    model = pg = None
    torch.cuda.empty_cache()
    device_step(d, a, batches, ceil, t_pag, n)


def interleaved(ref, model, batches, reps: int) -> None:
    """Resident and paged forward+backward taking turns, each after zeroing
    the gradients and synchronised, as step_time times them: the GPU's own
    speed drifts by a few percent over a run (its clock follows its power
    and temperature), as much as the paged step's margin, and a pair of
    steps sees the same drift.  Prints the median of the pairs' ratios."""
    res, pag, ratio = [], [], []
    for i in range(2 * reps + 1):
        ids = batches[i % len(batches)]
        for m, zero, out in ((ref, ref.zero_grad, res),
                             (model, lambda: wt.zero_grad(model), pag)):
            zero()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            m(ids, labels=ids).loss.backward()
            torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
        if i:   # the first pair warms both up again
            ratio.append(pag[-1] / res[-1])
    wt.grads(model)
    r = statistics.median(ratio)
    print(f"taking turns, {len(ratio)} pairs: resident {statistics.median(res[1:]) * 1e3:.1f} ms, "
          f"paged {statistics.median(pag[1:]) * 1e3:.1f} ms; paged / resident of a pair, median "
          f"{r:.3f} (range {min(ratio):.3f}-{max(ratio):.3f}): the GPU waited {(r - 1) / r * 100:.1f}% "
          f"of the paged step")


def accumulating(model, batches, reps: int, t_res: float) -> None:
    """Micro-batches of gradient accumulation: forward+backward with no
    zeroing between them, so that every gradient adds into the host's fp32
    sums rather than starting them (the first of a window), against the
    resident model adding into its own .grad."""
    pg = model._wspager.pager
    wt.zero_grad(model)
    model(batches[0], labels=batches[0]).loss.backward()   # the window's first
    pg.reset_stats()
    t = step_time(model, batches, reps=reps)
    st = pg.stats()
    wt.grads(model)
    print(f"accumulating micro-batches (no zeroing between them): paged {t * 1e3:.1f} ms, "
          f"resident {t_res * 1e3:.1f} ms; the GPU waited {(t - t_res) / t * 100:.1f}%; "
          f"host time adding {st['grad_add_ns'] / (reps + 1) / 1e6:.1f} ms a step")
    wt.zero_grad(model)


def lora_pager(a) -> dict:
    """from_pretrained's arguments for the paged LoRA base, as the options say."""
    kw = dict(device="cuda", host_cache=a.host_cache, gpu_slots=a.gpu_slots,
              host_decode=a.host_decode, keep_small=a.keep_small)
    if a.gpu_packed:
        kw["gpu_packed"] = a.gpu_packed
    return kw


def lora_stepper(model, batches):
    """peft's LoRA (r=16 on q, k, v, o) over `model` and AdamW over the
    adapters: the peft model, the optimizer, and step(i): the seconds of a
    whole step (forward, backward, AdamW, zero_grad) on batch i."""
    import peft
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step(i):
        ids = batches[i % len(batches)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    return model, opt, step


def lora_steps(d, a, batches, ceil):
    """LoRA (r=16 on q, k, v, o) over the frozen model, whole steps (forward,
    backward, AdamW over the adapters, zero_grad): resident against paged.
    The paged step's link-bound time is the weights it brings in (forward
    and backward each acquire every layer; no gradient leaves: the base is
    frozen)."""
    summaries = []

    def timed(model, reps, warm=1, before_timed=None, warming=lambda: False, most=200,
              profile=None, after_timed=None):
        """Median seconds of a whole step, after `warm` untimed steps and
        then more while `warming()` says so (at most `most`)."""
        model, opt, step = lora_stepper(model, batches)
        i = 0
        while i < warm or (warming() and i < warm + most):
            step(i)
            i += 1
        if before_timed:
            before_timed()
        ts = [step(i + k) for k in range(reps)]
        if after_timed:
            after_timed()
        if profile:   # one more forward+backward, its device timeline
            summaries.append(profiled_step(model, batches[0], opt.zero_grad, os.path.join(
                a.profile, f"lora-{profile}-b{a.batch}-{a.decode}.json")))
        return statistics.median(ts), ts, i

    if a.interleave:
        return lora_interleaved(d, a, batches, ceil)
    ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).cuda()
    t_res, _, _ = timed(ref, a.reps, profile=a.profile and "resident")
    del ref
    torch.cuda.empty_cache()
    notices = []
    model = wt.from_pretrained(d, **lora_pager(a), log=notices.append)
    pg = model._wspager.pager
    # untimed steps: the first fills the host cache, then until the pager
    # has chosen who decodes
    t0 = time.perf_counter()
    st = {}
    t_pag, t_all, warm = timed(model, a.reps, warm=2, before_timed=pg.reset_stats,
                               warming=lambda: pg.who_decodes() == "trying",
                               profile=a.profile and "paged", after_timed=lambda: st.update(pg.stats()))
    who = pg.who_decodes()
    print(f"decode: {who} ({'the link carries raw weights' if who == 'host' else 'the link carries packed layers'}), "
          f"after {warm} untimed steps ({time.perf_counter() - t0 - sum(t_all):.1f} s)")
    for msg in notices:
        if "who decodes" in msg:
            print(f"  {msg}")
    h2d = st["bytes_h2d"] / a.reps
    t_in = h2d / ceil["h2d"] / 1e9
    print(f"LoRA r=16 on q,k,v,o, {a.batch}x{a.seq} tokens, whole steps: resident "
          f"{t_res * 1e3:.1f} ms, paged {t_pag * 1e3:.1f} ms (median of {a.reps}: "
          f"{', '.join(f'{t * 1e3:.1f}' for t in t_all)}); paged / resident {t_pag / t_res:.2f}x")
    print(f"  weights in {h2d / 1e9:.2f} GB a step ({t_in * 1e3:.1f} ms at the link); "
          f"paged step / max(resident step, link time) = {t_pag / max(t_res, t_in):.2f}; "
          f"the GPU waited {(t_pag - max(t_res, t_in)) / t_pag * 100:.1f}% of the step beyond "
          f"what {'compute' if t_res >= t_in else 'the link'} needs")
    if a.profile:   # where the compute stream sat idle, paged against resident
        print(cuda_timeline.report(summaries[1], summaries[0]))
    wt.remove(model)


def lora_interleaved(d, a, batches, ceil):
    """LoRA steps, resident and paged taking turns (both models on the
    GPU): each pair's paged / resident ratio sees the same host speed.
    Printed: both medians, the median of the pairs' ratios, and how long
    the GPU waited beyond max(resident step, link time) by the median pair."""
    _, _, ref = lora_stepper(transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.bfloat16).cuda(), batches)
    model = wt.from_pretrained(d, **lora_pager(a))
    pg = model._wspager.pager
    _, _, pag = lora_stepper(model, batches)
    ref(0)
    i = 0
    while i < 2 or (pg.who_decodes() == "trying" and i < 200):
        pag(i)
        i += 1
    pg.reset_stats()
    pairs = [(pag(k), ref(k)) for k in range(a.reps)]
    h2d = pg.stats()["bytes_h2d"] / a.reps
    t_in = h2d / ceil["h2d"] / 1e9
    t_pag = statistics.median(p for p, _ in pairs)
    t_res = statistics.median(r for _, r in pairs)
    ratios = sorted(p / r for p, r in pairs)
    waits = sorted((p - max(r, t_in)) / p for p, r in pairs)
    print(f"LoRA r=16 on q,k,v,o, {a.batch}x{a.seq} tokens, whole steps taking turns "
          f"({a.reps} pairs, decode: {pg.who_decodes()}, {a.gpu_slots} slots"
          f"{', GPU tier ' + a.gpu_packed if a.gpu_packed else ''}"
          f"{'' if a.keep_small else ', small layers paged'}): resident "
          f"{t_res * 1e3:.1f} ms, paged {t_pag * 1e3:.1f} ms; paged / resident by pair: median "
          f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    print(f"  weights in {h2d / 1e9:.2f} GB a step ({t_in * 1e3:.1f} ms at the link); the GPU "
          f"waited beyond max(resident step, link time), by pair: median "
          f"{statistics.median(waits) * 100:.1f}% ({waits[0] * 100:.1f}% to "
          f"{waits[-1] * 100:.1f}%)")
    wt.remove(model)


def device_step(d, a, batches, ceil, t_fwd_bwd: Optional[float] = None,
                n: Optional[int] = None):
    """The step on the GPU inside the backward (wt.step_in_backward): a
    whole training step (forward, backward, AdamW) against the link's
    ceilings for what it moves: weights in (the pager's counter), fp32
    masters and Adam's two moments in and out (12 bytes a parameter each
    way), and the new bf16 weights out (2)."""
    # Masters and moments (12 bytes a parameter) kept by the pager: in
    # memory when --state-cache holds them, else partly in its overflow file.
    events = []
    extra = {"trace": lambda *ev: events.append(ev)} if a.profile else {}
    model = wt.from_pretrained(d, device="cuda", host_cache=a.host_cache, gpu_slots=a.gpu_slots, train=True,
                               state_cache=a.state_cache, **extra)
    pg = model._wspager.pager
    if n is None:   # the paged model's parameters: the masters' count
        n = sum(p.numel() for p in model.parameters())
    opt = wt.step_in_backward(model, torch.optim.AdamW, lr=1e-5)

    def one(ids):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    for ids in batches:   # masters and state made, then moved: two warm-ups
        one(ids)
    torch.cuda.synchronize()
    pg.reset_stats()
    reps, ts = a.reps, []
    for i in range(reps):
        t0 = time.perf_counter()
        one(batches[i % len(batches)])
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    t = statistics.median(ts)
    st = pg.stats()
    # As a training loop runs: no synchronize between steps, so that the
    # last layers' state leaving overlaps the next forward.
    t0 = time.perf_counter()
    for i in range(reps):
        one(batches[i % len(batches)])
    torch.cuda.synchronize()
    t_loop = (time.perf_counter() - t0) / reps
    print(f"steps inside the backward, each synchronised: "
          f"{', '.join(f'{x * 1e3:.1f}' for x in ts)} ms")
    if a.profile:   # one more step, its device timeline (after the counters)
        import gzip
        import shutil
        from torch.profiler import ProfilerActivity, profile
        path = os.path.join(a.profile, f"train-device-step-b{a.batch}.json")
        events.clear()
        # When the state's copies are issued, and on the update thread when
        # the new weights went to the pager and the buffer back to it.
        for name in ("prefetch", "step_layer", "_update", "_give_back"):
            def timed(g, *rest, _f=getattr(opt, name), _n=name.lstrip("_")):
                t = time.monotonic_ns()
                _f(g, *rest)
                events.append((_n, g.index, t, time.monotonic_ns(), 0))
            setattr(opt, name, timed)

        def mark(what):
            t = time.monotonic_ns()
            events.append((what, -1, t, t, 0))

        def one_marked(ids):
            mark("forward")
            loss = model(ids, labels=ids).loss
            mark("backward")
            loss.backward()
            mark("opt.step")
            opt.step()
            mark("synchronize")
            torch.cuda.synchronize()
            mark("end")
        # AdamW's step on the host: its launches block when the device is behind
        for ls in opt.layers.values():
            def stepped(_f=ls.opt.step):
                t = time.monotonic_ns()
                _f()
                events.append(("optimizer.step", -1, t, time.monotonic_ns(), 0))
            ls.opt.step = stepped
        t0 = time.monotonic_ns()
        acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU]
                                          if os.environ.get("WSP_PROFILE_CPU") else [])
        with profile(activities=acts) as prof:
            one_marked(batches[0])
        pg.stats()   # reaps the fills done: their events come now
        print("the pager's fills (GPU-timed) and blocked acquires, and on the host each "
              "layer's state copies issued (prefetch), its step issued (step_layer), its "
              "weights handed to the pager (update) and its buffer back (give_back), AdamW "
              "steps over 5 ms and the step's phases, in that step, ms from its start:")
        for stage, layer, b, e, nb in sorted(events, key=lambda ev: ev[2]):
            if stage != "optimizer.step" or e - b > 5e6:
                print(f"  {stage:14s} layer {layer:3d} {(b - t0) / 1e6:8.1f} -> {(e - t0) / 1e6:8.1f}"
                      f"  {nb / 1e9:.2f} GB")
        prof.export_chrome_trace(path)
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(path)
        trace = cuda_timeline.load(path + ".gz", calls=True)
        print(cuda_timeline.report(cuda_timeline.summarize(trace)))
    w_in = st["bytes_h2d"] / reps
    s_in, s_out = 12 * n, 14 * n
    t_in, t_out = (w_in + s_in) / ceil["h2d"] / 1e9, s_out / ceil["d2h"] / 1e9
    print(f"step inside the backward (wt.step_in_backward, torch.optim.AdamW on the GPU, "
          f"state_cache {a.state_cache}): forward+backward+step {t * 1e3:.1f} ms; state kept "
          f"{st['state_held'] / 1e9:.2f} GB, {st['state_resident'] / 1e9:.2f} GB in memory, "
          f"{st['overflow_written'] / reps / 1e9:.2f} GB a step to the overflow files")
    print(f"  in: weights {w_in / 1e9:.2f} GB + masters and moments {s_in / 1e9:.2f} GB = "
          f"{t_in * 1e3:.1f} ms at the link; out: masters, moments and weights "
          f"{s_out / 1e9:.2f} GB = {t_out * 1e3:.1f} ms at the link")
    # Both directions at once: each at its rate while the other runs.
    t_both = max((w_in + s_in) / ceil["h2d both"], s_out / ceil["d2h both"]) / 1e9
    alone = "not measured" if t_fwd_bwd is None else f"{t_fwd_bwd * 1e3:.1f} ms"
    print(f"  efficiency max(in, out) / step = {max(t_in, t_out) / t:.3f}; with both "
          f"directions at once ({t_both * 1e3:.1f} ms) {t_both / t:.3f}; the paged "
          f"forward+backward alone took {alone}; gradients through the "
          f"write-back path: {st['grad_pushes']}")
    print(f"  {reps} steps back to back (no synchronize between them, as a training loop): "
          f"{t_loop * 1e3:.1f} ms a step; with both directions at once {t_both / t_loop:.3f}")
    wt.remove(model)


if __name__ == "__main__":
    main()
