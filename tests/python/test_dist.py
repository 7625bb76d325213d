"""Data parallel over torch.distributed (two processes on this machine, as
two hosts would run them: each rank its own copy of the pack and its own
host tier): wspager.torch.from_pretrained(..., process_group=).  argv[1]
"cpu" (default): gloo and the host backend; "cuda": NCCL, a GPU a rank
(skip, 77, with fewer than two).
Checked on every rank: logits and greedy generate() bit-identical to the
resident model; with the host tier holding the model, each layer exchanged
once and each rank's own reads of the pack at most 0.6x its stored size,
the pager reading nothing itself; with a host tier too small for the
model, exchanges at every use (none read again from the disk by the
pager) and still identical logits.  Over NCCL the parts meet on the GPUs
(DeviceFeed): each part read once and kept, the two ranks' reads adding
up to the pack's stored bytes exactly, every layer exchanged at each use
and decoded from device memory (the pager reads nothing); with tied
embeddings (the embedding's layer needed twice a forward) identical
outputs, the second use left to the pager rather than a cycle of
exchanges; ranks whose packs differ refused at
open on both, naming both; a rank that stops mid-pass
makes the other fail with the reason within the group's timeout (gloo;
over NCCL torch's watchdog ends the process after the timeout instead,
saying why: checked too).
Training (train=True with the group): two AdamW steps with clipping, each
rank a half of the global batch, give on both ranks the gradient norms and
fp32 masters of one process that accumulates the two halves (loss / 2
each) - bit for bit on the CPU; so does torch's ZeroRedundancyOptimizer
(each rank steps its share of the masters, with wspager.torch.AdamW on the
CPU, and broadcasts it: state on each rank for a part only, the masters
applied to the layers once a step); with two micro-batches a rank, the
first inside wspager.torch.no_sync, the norms of one process accumulating
the four quarters (the sums associate differently: within 1e-6); ranks
whose backward passes differ (one froze a layer) refused on both, naming
it.

Run as `test_dist.py [cpu|cuda]`: builds the checkpoint and packs, then
starts the two ranks of each case (this file with argv "rank CASE MODE")
and checks what they wrote.  WSP_TEST_CASES=fits,tied runs those cases
only (a quick check on a GPU machine; it says which it left out)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import torch
import transformers

T = os.environ["WSP_TEST_TMP"]
HERE = os.path.dirname(os.path.abspath(__file__))


def train_steps(model, batches, scale: float, no_sync: bool = False, opt=None):
    """Two AdamW steps (torch's over model.parameters(), or `opt`) with
    clipping; each step's micro-batches (loss x scale each; all but the last
    inside no_sync when asked).  Returns the gradient norms and a digest of
    the fp32 masters."""
    import contextlib
    import wspager.torch as wt
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-3)
    norms = []
    for step in batches:
        for k, x in enumerate(step):
            quiet = no_sync and k < len(step) - 1
            with wt.no_sync(model) if quiet else contextlib.nullcontext():
                loss = model(x, labels=x).loss * scale
                loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
        opt.step()
        opt.zero_grad()
    h = hashlib.sha256()
    for _, p in wt.named_parameters(model):
        h.update(p.detach().cpu().numpy().tobytes())
    return norms, h.hexdigest()


def global_batches(vocab: int, dev):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, vocab, (4, 12), generator=g).to(dev) for _ in range(2)]


def rank_main(case: str, mode: str) -> None:
    import torch.distributed as dist
    import wspager
    import wspager.torch as wt
    from checks import start_rank
    rank, dev = start_rank(mode, 20)
    transformers.logging.set_verbosity_error()
    ckpt = os.path.join(T, "ckpt")
    pack = os.path.join(T, f"rank{rank}.wsp")
    if case == "tied":   # the head uses the embedding's weights: its layer twice a forward
        ckpt, pack = os.path.join(T, "tied-ckpt"), os.path.join(T, f"tied{rank}.wsp")
    if case == "differ" and rank == 1:
        pack = os.path.join(T, "other.wsp")
    out = {"rank": rank}
    if case == "train":
        model = wt.from_pretrained(pack, config=ckpt, device=dev, host_cache="64M",
                                   train=True,
                                   process_group=dist.group.WORLD)
        mine = [[b[2 * rank:2 * rank + 2]] for b in global_batches(model.config.vocab_size, dev)]
        out["norms"], out["digest"] = train_steps(model, mine, 1.0)
        wt.remove(model)
        model = wt.from_pretrained(pack, config=ckpt, device=dev, host_cache="64M",
                                   train=True,
                                   process_group=dist.group.WORLD)
        quarters = [[b[2 * rank:2 * rank + 1], b[2 * rank + 1:2 * rank + 2]]
                    for b in global_batches(model.config.vocab_size, dev)]
        out["accum_norms"], _ = train_steps(model, quarters, 0.5, no_sync=True)
        wt.remove(model)
        # ZeRO-1 as torch does it: each rank steps its share of the masters
        # and broadcasts it.  The library's AdamW steps CPU tensors only;
        # on GPUs some parameters stay on the device, so torch's.  NCCL
        # moves device memory only: the host masters go over gloo.
        from torch.distributed.optim import ZeroRedundancyOptimizer
        model = wt.from_pretrained(pack, config=ckpt, device=dev, host_cache="64M",
                                   train=True, process_group=dist.group.WORLD)
        opt = ZeroRedundancyOptimizer(
            wt.parameters(model), lr=1e-3,
            optimizer_class=wt.AdamW if mode == "cpu" else torch.optim.AdamW,
            process_group=None if mode == "cpu" else dist.new_group(backend="gloo"))
        tr, applied = model._wspager.trainer, []   # the masters applied once a step
        apply = tr.apply_masters
        tr.apply_masters = lambda: (applied.append(1), apply())[1]
        out["zero_norms"], out["zero_digest"] = train_steps(model, mine, 1.0, opt=opt)
        out["zero_applied"] = len(applied)
        out["zero_state"] = len(opt.optim.state)   # this rank's share
        out["zero_params"] = sum(len(g["params"]) for g in opt.param_groups)
        wt.remove(model)
        # ranks whose backward passes differ (rank 1 freezes the head):
        # refused on both, naming the layer
        model = wt.from_pretrained(pack, config=ckpt, device=dev, host_cache="64M",
                                   train=True, process_group=dist.group.WORLD)
        if rank == 1:
            model.lm_head.weight.requires_grad_(False)
        x = global_batches(model.config.vocab_size, dev)[0][2 * rank:2 * rank + 2]
        try:
            model(x, labels=x).loss.backward()
        except RuntimeError as e:
            out["uneven_error"] = str(e)
        wt.remove(model)
        json.dump(out, open(os.path.join(T, f"{case}-{rank}.json"), "w"))
        dist.destroy_process_group()
        return
    try:
        host_cache = "8M" if case == "small" else "64M"   # 8M: a few of the 7 layers
        model = wt.from_pretrained(pack, config=ckpt, device=dev, host_cache=host_cache,
                                   process_group=dist.group.WORLD)
    except ValueError as e:
        out["open_error"] = str(e)
        json.dump(out, open(os.path.join(T, f"{case}-{rank}.json"), "w"))
        return
    # transformers' own load, in its default configuration
    ref = transformers.AutoModelForCausalLM.from_pretrained(ckpt).to(dev)
    torch.manual_seed(1)   # the same inputs on both ranks (data parallel would differ; no matter)
    ids = torch.randint(0, ref.config.vocab_size, (2, 12)).to(dev)
    if case == "dies" and rank == 1:
        os._exit(3)        # stops without a word, mid-run
    t0 = time.monotonic()
    try:
        with torch.no_grad():
            got = model(ids).logits
            gen = model.generate(ids[:1, :5], max_new_tokens=6, do_sample=False)
            want = ref(ids).logits
            want_gen = ref.generate(ids[:1, :5], max_new_tokens=6, do_sample=False)
    except RuntimeError as e:
        out["run_error"] = str(e)
        out["seconds"] = time.monotonic() - t0
        json.dump(out, open(os.path.join(T, f"{case}-{rank}.json"), "w"))
        os._exit(0)        # the group is broken: no orderly shutdown to wait for
    off = model._wspager
    with wspager.Pack(pack) as p:
        out["stored"] = p.summary["stored_bytes"]
        out["layers"] = len(p.layers)
    out.update(off.feed.stats())
    out["pager_bytes_read"] = off.pager.stats()["bytes_read"]
    out["diff"] = (got - want).abs().max().item()
    out["gen_equal"] = torch.equal(gen, want_gen)
    wt.remove(model)
    json.dump(out, open(os.path.join(T, f"{case}-{rank}.json"), "w"))
    dist.destroy_process_group()


def left_out(case: str) -> bool:
    """Whether WSP_TEST_CASES names other cases, and not this one."""
    only = os.environ.get("WSP_TEST_CASES")
    if only and case not in only.split(","):
        print(f"case {case}: left out (WSP_TEST_CASES={only})")
        return True
    return False


def launch(case: str, mode: str, ends: list = None) -> list:
    """Each rank's result of `case` (None for a rank that wrote none).
    `ends`, a list: each rank's (exit status, seconds it ran, its stderr)
    appended there, its stderr kept instead of shown."""
    from checks import free_port
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    errs = [open(os.path.join(T, f"{case}-{r}.stderr"), "w+") if ends is not None else None
            for r in range(2)]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, "rank", case, mode],
                              env=dict(env, RANK=str(r)), stderr=errs[r])
             for r in range(2)]
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            raise SystemExit(f"FAIL: case {case}: a rank hung (killed after 240 s)")
        if ends is not None:
            errs[r].seek(0)
            ends.append((p.returncode, time.monotonic() - t0, errs[r].read()))
            errs[r].close()
    res = []
    for r in range(2):
        f = os.path.join(T, f"{case}-{r}.json")
        res.append(json.load(open(f)) if os.path.exists(f) else None)
    return res


def dies_over_nccl(check) -> None:
    """Rank 1 stops mid-run.  Over NCCL rank 0's collectives cannot fail
    by themselves: torch's watchdog ends its process once the group's
    timeout (20 s) has passed, saying why.  Either way rank 0 must end,
    with the reason, and not hang."""
    ends = []
    r0, r1 = launch("dies", "cuda", ends)
    (rc0, secs0, err0), _ = ends
    check(r1 is None, "dies: rank 1 should have written nothing")
    if r0 is not None and "run_error" in r0:   # the error reached the forward
        print(f"dies: rank 0 failed after {r0['seconds']:.1f} s: {r0['run_error'][:200]}")
        check("exchanging layer" in r0["run_error"] or "process group" in r0["run_error"],
              f"dies: the error does not name the exchange: {r0['run_error'][:300]}")
        return
    why = [line for line in err0.splitlines() if "imeout" in line or "atchdog" in line]
    print(f"dies: rank 0 ended with status {rc0} after {secs0:.1f} s (from its start); "
          f"it said: {why[0][:300] if why else err0[-300:]}")
    check(rc0 != 0, "dies: rank 0 ended with status 0 but wrote no result")
    check(bool(why), "dies: rank 0's stderr does not say that a collective timed out")
    check(secs0 < 150, f"dies: rank 0 took {secs0:.1f} s to end (the group's timeout is 20 s)")


def main(mode: str) -> None:
    if mode == "cuda" and torch.cuda.device_count() < 2:
        print("SKIP: fewer than two CUDA devices")
        sys.exit(77)
    sys.path.insert(0, HERE)
    import wspager
    from checks import check, finish
    from configs import llama
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)

    def ranks(case: str):
        """Each rank's result of `case`; a rank that wrote none fails."""
        if left_out(case):
            return
        for r in launch(case, mode):
            check(r is not None, f"{case}: a rank wrote no result")
            if r is not None:
                yield r

    ckpt = os.path.join(T, "ckpt")
    transformers.LlamaForCausalLM(llama(64, 4, 300)).save_pretrained(ckpt)
    wspager.convert(ckpt, os.path.join(T, "rank0.wsp"))
    shutil.copytree(os.path.join(T, "rank0.wsp"), os.path.join(T, "rank1.wsp"))  # a host each
    tied = llama(64, 4, 300)
    tied.tie_word_embeddings = True
    transformers.LlamaForCausalLM(tied).save_pretrained(os.path.join(T, "tied-ckpt"))
    for r in range(2):
        wspager.convert(os.path.join(T, "tied-ckpt"), os.path.join(T, f"tied{r}.wsp"))
    other = os.path.join(T, "other-ckpt")
    transformers.LlamaForCausalLM(llama(64, 4, 300)).save_pretrained(other)
    wspager.convert(other, os.path.join(T, "other.wsp"))

    fits = list(ranks("fits"))
    for r in fits:
        check(r["diff"] == 0 and r["gen_equal"], f"fits, rank {r['rank']}: output differs")
        check(r["pager_bytes_read"] == 0, f"fits, rank {r['rank']}: the pager read "
                                          f"{r['pager_bytes_read']} bytes itself")
        check(r["bytes_read"] <= 0.6 * r["stored"] and r["bytes_read"] > 0,
              f"fits, rank {r['rank']}: read {r['bytes_read']} of {r['stored']}")
        if r.get("device"):   # NCCL, GPU decode: the parts meet on the GPUs
            print(f"fits, rank {r['rank']}: max |diff| {r['diff']}, generate equal "
                  f"{r['gen_equal']}; parts exchanged on the GPUs: read {r['bytes_read']} of "
                  f"{r['stored']} stored bytes ({r['bytes_read'] / r['stored']:.2f}x) in "
                  f"{r['reads']} parts for {r['layers']} layers, kept {r['keep']}; "
                  f"{r['exchanges']} exchanges ({r['not_taken']} not needed), pager read "
                  f"{r['pager_bytes_read']}")
            check(r["keep"] == 1 and r["reads"] == r["layers"],
                  f"fits, rank {r['rank']}: {r['reads']} parts read, keep={r['keep']}")
            # one forward and generate()'s: every layer at each
            check(r["exchanges"] >= 2 * r["layers"] and r["not_taken"] < r["exchanges"],
                  f"fits, rank {r['rank']}: {r['exchanges']} exchanges")
            continue
        print(f"fits, rank {r['rank']}: max |diff| {r['diff']}, generate equal {r['gen_equal']}; "
              f"read {r['bytes_read']} of {r['stored']} stored bytes "
              f"({r['bytes_read'] / r['stored']:.2f}x), received {r['bytes_received']}, "
              f"{r['exchanges']} exchanges of {r['layers']} layers, pager read "
              f"{r['pager_bytes_read']}")
        check(r["once"] == 1 and r["exchanges"] == r["layers"],
              f"fits, rank {r['rank']}: {r['exchanges']} exchanges, once={r['once']}")
        check(r["bytes_read"] + r["bytes_received"] == r["stored"],
              f"fits, rank {r['rank']}: read + received != stored")
    if len(fits) == 2 and all(r.get("device") for r in fits):
        check(fits[0]["bytes_read"] + fits[1]["bytes_read"] == fits[0]["stored"],
              "fits: the ranks together did not read the pack exactly once")

    for r in ranks("tied"):
        print(f"tied embeddings, rank {r['rank']}: max |diff| {r['diff']}, generate equal "
              f"{r['gen_equal']}; {r['exchanges']} exchanges of {r['layers']} layers, "
              f"{r.get('repeats', '-')} uses left to the pager, pager read "
              f"{r['pager_bytes_read']}")
        check(r["diff"] == 0 and r["gen_equal"], f"tied, rank {r['rank']}: output differs")
        if r.get("device"):
            # A second use in a forward is not a cycle of exchanges: each
            # forward (repeats + 1 of them) exchanges each layer once, and
            # the embedding's a second time for the head, less the repeats
            # left to the pager; plus the two issued ahead at the end:
            # (repeats + 1) * (layers + 1) - repeats + 2.
            check(r["repeats"] > 0 and
                  r["exchanges"] <= (r["repeats"] + 1) * r["layers"] + 3,
                  f"tied, rank {r['rank']}: {r['exchanges']} exchanges, "
                  f"{r['repeats']} repeats")

    for r in ranks("small"):
        print(f"small host tier, rank {r['rank']}: max |diff| {r['diff']}, generate equal "
              f"{r['gen_equal']}; {r['exchanges']} exchanges, read {r['bytes_read']}, "
              f"pager read {r['pager_bytes_read']}")
        check(r["diff"] == 0 and r["gen_equal"], f"small, rank {r['rank']}: output differs")
        if not r.get("device"):   # on the GPUs the host tier takes no part
            check(r["once"] == 0 and r["exchanges"] > r["layers"],
                  f"small, rank {r['rank']}: {r['exchanges']} exchanges, once={r['once']}")
        # exchanged ahead of need only as far as the tier keeps them: none
        # evicted before its use and read again
        check(r["pager_bytes_read"] == 0, f"small, rank {r['rank']}: the pager read "
                                          f"{r['pager_bytes_read']} bytes itself")

    if not left_out("train"):   # one process accumulating both halves is what the ranks equal
        import wspager.torch as wt
        dev = torch.device("cuda", 0) if mode == "cuda" else torch.device("cpu")
        one = wt.from_pretrained(os.path.join(T, "rank0.wsp"), config=ckpt, device=dev,
                                 host_cache="64M", train=True)
        halves = [[b[:2], b[2:]] for b in global_batches(one.config.vocab_size, dev)]
        want_norms, want = train_steps(one, halves, 0.5)
        wt.remove(one)
        one = wt.from_pretrained(os.path.join(T, "rank0.wsp"), config=ckpt, device=dev,
                                 host_cache="64M", train=True)
        quarters = [[b[k:k + 1] for k in range(4)]
                    for b in global_batches(one.config.vocab_size, dev)]
        want_accum, _ = train_steps(one, quarters, 0.25)
        wt.remove(one)
        one = wt.from_pretrained(os.path.join(T, "rank0.wsp"), config=ckpt, device=dev,
                                 host_cache="64M", train=True)
        opt = (wt.AdamW if mode == "cpu" else torch.optim.AdamW)(wt.parameters(one), lr=1e-3)
        want_zero_norms, want_zero = train_steps(one, halves, 0.5, opt=opt)
        wt.remove(one)
        for r in ranks("train"):
            print(f"train, rank {r['rank']}: gradient norms {r['norms']} (one process: "
                  f"{want_norms}); masters {'equal' if r['digest'] == want else 'DIFFER'}")
            print(f"train, rank {r['rank']}: with no_sync, norms {r['accum_norms']} (one process "
                  f"accumulating four: {want_accum})")
            check(all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(r["accum_norms"], want_accum)),
                  f"train, rank {r['rank']}: no_sync norms {r['accum_norms']} vs {want_accum}")
            print(f"train, rank {r['rank']}: uneven backward passes: {r.get('uneven_error')}")
            check("lm_head" in r.get("uneven_error", "") and "differ" in r["uneven_error"],
                  f"train, rank {r['rank']}: uneven backward passes: {r.get('uneven_error')}")
            print(f"train, rank {r['rank']}: ZeroRedundancyOptimizer: norms {r['zero_norms']} "
                  f"(one process: {want_zero_norms}), masters "
                  f"{'equal' if r['zero_digest'] == want_zero else 'DIFFER'}; optimizer state "
                  f"for {r['zero_state']} of {r['zero_params']} parameters")
            check(r["zero_applied"] == 2, f"train, rank {r['rank']}: the masters were "
                  f"applied {r['zero_applied']} times in two steps (the inner step's too?)")
            check(0 < r["zero_state"] < r["zero_params"],
                  f"train, rank {r['rank']}: state for {r['zero_state']} of "
                  f"{r['zero_params']} parameters: the step is not shared")
            if mode == "cpu":
                check(r["norms"] == want_norms and r["digest"] == want,
                      f"train, rank {r['rank']}: not bit for bit one process's")
                check(r["zero_norms"] == want_zero_norms and r["zero_digest"] == want_zero,
                      f"train, rank {r['rank']}: ZeRO steps not bit for bit one process's")
            else:   # two GPUs' kernels: report, and the norms within rounding
                check(all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(r["norms"], want_norms)),
                      f"train, rank {r['rank']}: norms {r['norms']} vs {want_norms}")
                check(all(abs(a - b) <= 1e-5 * abs(b)
                          for a, b in zip(r["zero_norms"], want_zero_norms)),
                      f"train, rank {r['rank']}: ZeRO norms {r['zero_norms']} vs {want_zero_norms}")

    for r in [] if left_out("differ") else launch("differ", mode):
        check(r is not None and "open_error" in r, f"differ: a rank opened: {r}")
        if r and "open_error" in r:
            print(f"differ, rank {r['rank']}: {r['open_error']}")
            check("rank0.wsp" in r["open_error"] and "other.wsp" in r["open_error"],
                  f"differ: the message names both packs: {r['open_error']}")

    if left_out("dies"):
        finish()
    if mode == "cuda":   # NCCL: its watchdog ends a rank whose peer stopped
        dies_over_nccl(check)
        finish()
    r0, r1 = launch("dies", mode)
    check(r1 is None, "dies: rank 1 should have written nothing")
    check(r0 is not None and "run_error" in r0, f"dies: rank 0 did not fail: {r0}")
    if r0 and "run_error" in r0:
        print(f"dies: rank 0 failed after {r0['seconds']:.1f} s: {r0['run_error'][:200]}")
        check("exchanging layer" in r0["run_error"], "dies: the error names the exchange")
        check(r0["seconds"] < 60, f"dies: {r0['seconds']:.1f} s to fail")
    finish()


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
