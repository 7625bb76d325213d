"""torch's DistributedDataParallel over an offloaded model, as people
write data-parallel training: two processes on this machine, each its own
copy of the pack (argv[1] "cpu", default: gloo and the host backend;
"cuda": NCCL, a GPU a rank, skip (77) with fewer than two).

* LoRA: ``DDP(get_peft_model(from_pretrained(..., process_group=WORLD)))``
  (the pager sharing the reads over the group, DDP averaging the
  adapters): two AdamW steps with clipping, each rank half of the global
  batch, give on both ranks the gradient norms and adapters of one process
  accumulating the two halves - bit for bit on the CPU.  DDP leaves exactly
  the paged parameters alone (their names under peft's wrapper).
* Full fine-tuning (``train=True``, no process group given, the final norm
  kept resident): ``DDP(model)``; the pager averages the paged gradients
  over DDP's group, DDP the resident norm: norms and fp32 masters of one
  process, bit for bit on the CPU; the same with the pager's own process
  group (the norm then left to DDP alone).  With two micro-batches a rank, the
  first inside DDP's ``no_sync``: the norms of one process accumulating
  the four quarters (within 1e-6), and the pager averaged once a step,
  not once a backward.  With every trained parameter paged, DDP is
  refused with a message saying what to do instead.
* transformers' Trainer (which wraps the model in DDP itself) over two
  ranks, LoRA and full fine-tuning with accumulation: both ranks end with
  the same weights, those of one process on the global batch (one GPU,
  within 1e-5), the pager averaging once an optimizer step.
* ``torch.nn.DataParallel`` over a paged model (the Trainer's choice when
  one process sees several GPUs) is refused when built, saying what to do
  (on the CPU, torch is told it has two GPUs); over CUDA, the Trainer in
  one process seeing both GPUs stops with that message.
* Ranks whose packs differ: DDP's construction refused on both, naming
  both packs."""
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
sys.path.insert(0, HERE)


def batches(vocab: int, dev):
    """Two global batches of four rows."""
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, vocab, (4, 12), generator=g).to(dev) for _ in range(2)]


def lora(base):
    import peft
    torch.manual_seed(1)
    return peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                     target_modules=["q_proj", "v_proj"]))


def steps(run, params, digest_of, steps_batches, scale: float, quiet=None):
    """AdamW over `params` with clipping, one step a list of micro-batches
    (the loss x `scale` each; all but the last inside `quiet()` when
    given).  `run` is what the forward goes through (the model, or DDP).
    Returns the gradient norms and the digest of `digest_of()`."""
    import contextlib
    opt = torch.optim.AdamW(params, lr=1e-3)
    norms = []
    for step in steps_batches:
        for k, x in enumerate(step):
            with quiet() if quiet and k < len(step) - 1 else contextlib.nullcontext():
                (run(x, labels=x).loss * scale).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0).item())
        opt.step()
        opt.zero_grad()
    return norms, digest(digest_of())


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def adapters(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def masters(model):
    import wspager.torch as wt
    return list(wt.named_parameters(model))


class Rows(torch.utils.data.Dataset):
    def __init__(self, vocab: int):
        self.rows = torch.randint(0, vocab, (16, 12), generator=torch.Generator().manual_seed(3))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def hf_trainer(model, tag: str, per_device: int, dev) -> transformers.Trainer:
    """The Trainer as a script would build it: batches in order (where this
    transformers can), so one process and two ranks see the same global
    batches; two micro-batches a step."""
    kw = {}
    if "train_sampling_strategy" in transformers.TrainingArguments.__dataclass_fields__:
        kw["train_sampling_strategy"] = "sequential"
    args = transformers.TrainingArguments(
        output_dir=os.path.join(T, tag), per_device_train_batch_size=per_device,
        gradient_accumulation_steps=2, max_grad_norm=1.0, learning_rate=1e-3, max_steps=2,
        use_cpu=dev.type == "cpu", report_to=[], save_strategy="no", seed=5,
        dataloader_num_workers=0, **kw)
    return transformers.Trainer(model=model, args=args,
                                train_dataset=Rows(model.config.vocab_size))


def digest(pairs) -> str:
    h = hashlib.sha256()
    for _, p in sorted(pairs, key=lambda np: np[0]):
        h.update(p.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()


def flat(pairs) -> torch.Tensor:
    return torch.cat([p.detach().cpu().float().flatten() for _, p in sorted(pairs, key=lambda
                                                                             np: np[0])])


def trainer_both(load, tag: str, per_device: int, dev) -> dict:
    """The Trainer's LoRA and full fine-tuning runs: the weights after."""
    import wspager.torch as wt
    out = {}
    model = lora(load())
    tr = hf_trainer(model, f"lora-{tag}", per_device, dev)
    tr.train()
    out["wrapped"] = type(tr.model_wrapped).__name__
    out["lora"] = flat(adapters(model)).tolist()
    out["lora_digest"] = digest(adapters(model))
    wt.remove(model.base_model.model)
    model = load(train=True, resident=["model.norm"])
    tr = hf_trainer(model, f"full-{tag}", per_device, dev)
    tr.train()
    out["full"] = flat(masters(model)).tolist()
    out["full_digest"] = digest(masters(model))
    gsum = model._wspager.trainer.gsum
    out["summed"] = gsum.summed if gsum is not None else None
    wt.remove(model)
    return out


def one_main(mode: str) -> None:
    """One process with the global batch, on one GPU (CUDA_VISIBLE_DEVICES)
    as the Trainer's user runs it: the weights the ranks must equal."""
    import wspager.torch as wt
    dev = torch.device("cuda", 0) if mode == "cuda" else torch.device("cpu")
    transformers.logging.set_verbosity_error()

    def load(**kw):
        return wt.from_pretrained(os.path.join(T, "rank0.wsp"), config=os.path.join(T, "ckpt"),
                                  device=dev, host_cache="64M", **kw)

    json.dump(trainer_both(load, "one", 4, dev), open(os.path.join(T, "one.json"), "w"))


def rank_main(case: str, mode: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import wspager.torch as wt
    from wspager._ddp import paged_ids
    from checks import start_rank
    rank, dev = start_rank(mode, 30)
    where = {"device_ids": [rank]} if mode == "cuda" else {}
    transformers.logging.set_verbosity_error()
    ckpt = os.path.join(T, "ckpt")
    pack = os.path.join(T, "other.wsp" if case == "differ" and rank == 1 else f"rank{rank}.wsp")
    out = {"rank": rank}

    def load(**kw):
        return wt.from_pretrained(pack, config=ckpt, device=dev, host_cache="64M", **kw)

    vocab = transformers.AutoConfig.from_pretrained(ckpt).vocab_size
    mine = [[b[2 * rank:2 * rank + 2]] for b in batches(vocab, dev)]
    if case == "lora":
        base = load(process_group=dist.group.WORLD)
        model = lora(base)
        ddp = DDP(model, **where)
        paged = paged_ids(base._wspager)
        out["paged_names"] = sorted(n for n, p in model.named_parameters() if id(p) in paged)
        out["ignored"] = sorted(ddp.parameters_to_ignore)
        out["norms"], out["digest"] = steps(ddp, trainable(model), lambda: adapters(model),
                                            mine, 1.0)
    elif case == "full":
        model = load(train=True, resident=["model.norm"])
        ddp = DDP(model, **where)
        out["norms"], out["digest"] = steps(ddp, list(model.parameters()),
                                            lambda: masters(model), mine, 1.0)
        wt.remove(model)
        # with the pager's own group too (shared reads): the norm is DDP's
        # alone, not averaged twice
        model = load(train=True, resident=["model.norm"], process_group=dist.group.WORLD)
        before = len(model._wspager.trainer.gsum.resident)
        ddp = DDP(model, **where)
        out["group_resident"] = [before, len(model._wspager.trainer.gsum.resident)]
        out["group_norms"], out["group_digest"] = steps(ddp, list(model.parameters()),
                                                        lambda: masters(model), mine, 1.0)
        wt.remove(model)
        model = load(train=True, resident=["model.norm"])
        ddp = DDP(model, **where)
        quarters = [[b[2 * rank:2 * rank + 1], b[2 * rank + 1:2 * rank + 2]]
                    for b in batches(vocab, dev)]
        out["accum_norms"], _ = steps(ddp, list(model.parameters()), lambda: masters(model),
                                      quarters, 0.5, quiet=ddp.no_sync)
        out["summed"] = model._wspager.trainer.gsum.summed
        wt.remove(model)
        model = load(train=True)      # every trained parameter paged
        try:
            DDP(model, **where)
        except RuntimeError as e:
            out["all_paged_error"] = str(e)
        wt.remove(model)
    elif case == "trainer":
        out.update(trainer_both(load, f"rank{rank}", 2, dev))
    elif case == "differ":
        model = load()
        try:
            DDP(model, **where)
        except ValueError as e:
            out["error"] = str(e)
    json.dump(out, open(os.path.join(T, f"{case}-{rank}.json"), "w"))
    dist.destroy_process_group()


def two_packs() -> str:
    """The tests' checkpoint (a small Llama) and a pack copy for each rank,
    as two hosts would have them; returns the checkpoint's folder."""
    import wspager
    from configs import llama
    torch.manual_seed(0)
    ckpt = os.path.join(T, "ckpt")
    transformers.LlamaForCausalLM(llama(64, 4, 300)).save_pretrained(ckpt)
    wspager.convert(ckpt, os.path.join(T, "rank0.wsp"))
    shutil.copytree(os.path.join(T, "rank0.wsp"), os.path.join(T, "rank1.wsp"))
    return ckpt


def launch(case: str, mode: str, script: str = __file__) -> list:
    """Each rank's result of `case` (None for a rank that wrote none), the
    ranks running `script`."""
    from checks import free_port
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, script, "rank", case, mode],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(2)]
    for p in procs:
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"FAIL: case {case}: a rank hung (killed after 300 s)")
    res = []
    for r in range(2):
        f = os.path.join(T, f"{case}-{r}.json")
        res.append(json.load(open(f)) if os.path.exists(f) else None)
    return res


def main(mode: str) -> None:
    if mode == "cuda" and torch.cuda.device_count() < 2:
        print("SKIP: fewer than two CUDA devices")
        sys.exit(77)
    from checks import check, finish, require
    require("peft")
    require("accelerate")
    import wspager
    import wspager.torch as wt
    from configs import llama
    transformers.logging.set_verbosity_error()
    ckpt = two_packs()
    other = os.path.join(T, "other-ckpt")
    transformers.LlamaForCausalLM(llama(64, 4, 300)).save_pretrained(other)
    wspager.convert(other, os.path.join(T, "other.wsp"))
    dev = torch.device("cuda", 0) if mode == "cuda" else torch.device("cpu")
    exact = mode == "cpu"

    def load(**kw):
        return wt.from_pretrained(os.path.join(T, "rank0.wsp"), config=ckpt, device=dev,
                                  host_cache="64M", **kw)

    def ranks(case: str):
        t0 = time.monotonic()
        res = launch(case, mode)
        print(f"case {case}: {time.monotonic() - t0:.1f} s")
        for r in res:
            check(r is not None, f"{case}: a rank wrote no result")
        return [r for r in res if r is not None]

    def near(a, b, what: str, tol: float = 1e-6) -> None:
        check(len(a) == len(b) and all(abs(x - y) <= tol * max(abs(y), 1e-3)
                                       for x, y in zip(a, b)), f"{what}: {a} vs {b}")

    def same(r, got, want, what: str) -> None:
        """Bit for bit on the CPU; within rounding over two GPUs' kernels."""
        (norms, dig), (want_norms, want_dig) = got, want
        print(f"{what}, rank {r['rank']}: norms {norms} (one process: {want_norms}); "
              f"{'equal' if dig == want_dig else 'different'} weights")
        if exact:
            check(norms == want_norms and dig == want_dig,
                  f"{what}, rank {r['rank']}: not bit for bit one process's")
        else:
            near(norms, want_norms, f"{what}, rank {r['rank']}", 1e-5)

    vocab = 300
    halves = [[b[:2], b[2:]] for b in batches(vocab, dev)]
    quarters = [[b[k:k + 1] for k in range(4)] for b in batches(vocab, dev)]

    # LoRA over a paged base: one process accumulating the halves
    model = lora(load())
    want = steps(model, trainable(model), lambda: adapters(model), halves, 0.5)
    wt.remove(model.base_model.model)
    check("_ddp_params_and_buffers_to_ignore" not in model.base_model.model.__dict__,
          "remove left the names for DDP on the model")
    for r in ranks("lora"):
        check(r["ignored"] == r["paged_names"] and len(r["ignored"]) > 0,
              f"lora, rank {r['rank']}: DDP ignored {r['ignored'][:3]}... "
              f"not the paged {r['paged_names'][:3]}...")
        print(f"lora, rank {r['rank']}: DDP left {len(r['ignored'])} paged parameters to the "
              f"pager, e.g. {r['ignored'][0]}")
        same(r, (r["norms"], r["digest"]), want, "lora")

    # Full fine-tuning, the final norm resident
    model = load(train=True, resident=["model.norm"])
    want = steps(model, list(model.parameters()), lambda: masters(model), halves, 0.5)
    wt.remove(model)
    model = load(train=True, resident=["model.norm"])
    want_accum, _ = steps(model, list(model.parameters()), lambda: masters(model), quarters, 0.25)
    wt.remove(model)
    for r in ranks("full"):
        same(r, (r["norms"], r["digest"]), want, "full")
        same(r, (r["group_norms"], r["group_digest"]), want, "full with process_group=")
        check(r["group_resident"] == [1, 0], f"full, rank {r['rank']}: parameters the pager "
              f"averages beside DDP, before and after it wrapped: {r['group_resident']}")
        print(f"full, rank {r['rank']}: with DDP's no_sync, norms {r['accum_norms']} (one "
              f"process accumulating four: {want_accum}); the pager averaged {r['summed']} "
              f"times in 2 steps of 2 backward passes")
        near(r["accum_norms"], want_accum, f"full, rank {r['rank']}, no_sync")
        check(r["summed"] == 2, f"full, rank {r['rank']}: averaged {r['summed']} times, not 2")
        err = r.get("all_paged_error", "")
        print(f"full, rank {r['rank']}: every trained parameter paged: ...{err[-150:]}")
        check("process_group=" in err and "resident=['model.norm']" in err,
              f"full, rank {r['rank']}: DDP over an all-paged model: {err!r}")

    # nn.DataParallel (what the Trainer picks when one process sees several
    # GPUs) would run copies without the pager's weights: refused when built.
    # Without two GPUs here, torch is told it has two.
    model = load()
    count = torch.cuda.device_count
    if mode == "cpu":
        torch.cuda.device_count = lambda: 2
    try:
        torch.nn.DataParallel(lora(model))
        err = ""
    except RuntimeError as e:
        err = str(e)
    finally:
        torch.cuda.device_count = count
    wt.remove(model)
    print(f"DataParallel: {err[:100]}...")
    check("DataParallel cannot copy a paged model" in err and "torchrun" in err,
          f"DataParallel over a paged model: {err!r}")
    if mode == "cuda":       # the Trainer in one process seeing both GPUs
        model = load()
        try:
            hf_trainer(lora(model), "dp", 4, dev).train()
            err = ""
        except RuntimeError as e:
            err = str(e)
        wt.remove(model)
        print(f"the Trainer in one process over two GPUs: {err[:100]}...")
        check("CUDA_VISIBLE_DEVICES" in err, f"the Trainer over two GPUs: {err!r}")

    # transformers' Trainer: one process with the global batch, then two ranks
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    rc = subprocess.call([sys.executable, __file__, "one", mode], env=env, timeout=300)
    check(rc == 0, f"the one-process Trainer run ended with status {rc}")
    one = json.load(open(os.path.join(T, "one.json"))) if rc == 0 else None
    check(one is None or one["wrapped"] not in ("DataParallel", "DistributedDataParallel"),
          f"the one-process Trainer wrapped the model in {one and one['wrapped']}")
    want_lora = torch.tensor(one["lora"]) if one else None
    want_full = torch.tensor(one["full"]) if one else None
    res = ranks("trainer") if one else []
    for r in res:
        d_lora = (torch.tensor(r["lora"]) - want_lora).abs().max().item()
        d_full = (torch.tensor(r["full"]) - want_full).abs().max().item()
        print(f"trainer, rank {r['rank']}: wrapped in {r['wrapped']}; max |difference| from "
              f"one process: adapters {d_lora:.3g}, masters {d_full:.3g}; the pager averaged "
              f"{r['summed']} times in 2 steps of 2 micro-batches")
        check(r["wrapped"] == "DistributedDataParallel",
              f"trainer, rank {r['rank']}: the Trainer wrapped the model in {r['wrapped']}")
        check(d_lora <= 1e-5 and d_full <= 1e-5,
              f"trainer, rank {r['rank']}: not one process's weights ({d_lora}, {d_full})")
        check(r["summed"] == 2, f"trainer, rank {r['rank']}: averaged {r['summed']} times")
    if len(res) == 2:
        check(res[0]["lora_digest"] == res[1]["lora_digest"] and
              res[0]["full_digest"] == res[1]["full_digest"],
              "trainer: the two ranks' weights differ")

    for r in ranks("differ"):
        print(f"differ, rank {r['rank']}: {r.get('error')}")
        check("rank0.wsp" in r.get("error", "") and "other.wsp" in r["error"],
              f"differ, rank {r['rank']}: {r.get('error')!r}")
    finish()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "one":
        one_main(sys.argv[2])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
