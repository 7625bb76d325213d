"""torch's FSDP2 (``fully_shard``) over an offloaded model, told to leave
the paged parameters alone (``ignored_params=wt.paged_parameters(model)``):
two processes on this machine, each its own copy of the pack (argv[1]
"cpu", default: gloo and the host backend; "cuda": NCCL, a GPU a rank,
skip (77) with fewer than two).

* LoRA: FSDP2 shards and averages the adapters, the pager shares the
  reads (``process_group=``): two AdamW steps with clipping, each rank
  half of the global batch, give the gradient norms and adapters of one
  process accumulating the two halves.
* Full fine-tuning (``train=True`` with ``process_group=``, the final norm
  kept resident): FSDP2 shards the norm, the pager averages the paged
  layers' gradients: the norms and masters of one process.
* ``train=True`` without a process group under FSDP2: nobody would average
  the paged gradients and the ranks would drift apart; refused at the
  first backward, saying to pass ``process_group=``.
* ``paged_parameters`` names exactly the parameters DDP leaves to the
  pager, and refuses a model holding no offloaded model."""
import json
import os
import sys
import time

import torch
import transformers

T = os.environ["WSP_TEST_TMP"]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from checks import start_rank  # noqa: E402
from test_ddp import (adapters, batches, digest, launch, lora, masters,  # noqa: E402
                      trainable, two_packs)


def clipped_steps(run, params, digest_of, steps_batches, scale: float):
    """AdamW over `params`, clipping the global norm to 1, a step a list of
    micro-batches (the loss x `scale` each).  With FSDP2 some gradients
    are shards (DTensors): the norm is then summed over their full
    tensors, as torch's own clipping does for a sharded model."""
    from torch.distributed.tensor import DTensor
    opt = torch.optim.AdamW(params, lr=1e-3)
    norms = []
    for step in steps_batches:
        for x in step:
            (run(x, labels=x).loss * scale).backward()
        sq = torch.zeros((), dtype=torch.float64)
        for p in params:
            g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            sq += g.detach().double().cpu().pow(2).sum()
        norm = sq.sqrt().item()
        for p in params:
            p.grad.mul_(min(1.0, 1.0 / (norm + 1e-6)))
        norms.append(norm)
        opt.step()
        opt.zero_grad()
    return norms, digest(full(digest_of()))


def full(pairs):
    """Named tensors with any DTensor gathered whole."""
    from torch.distributed.tensor import DTensor
    return [(n, p.full_tensor() if isinstance(p, DTensor) else p) for n, p in pairs]


def rank_main(case: str, mode: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    import wspager.torch as wt
    rank, dev = start_rank(mode, 30)
    mesh = init_device_mesh(dev.type, (2,))
    transformers.logging.set_verbosity_error()
    ckpt = os.path.join(T, "ckpt")
    out = {"rank": rank}

    def load(**kw):
        return wt.from_pretrained(os.path.join(T, f"rank{rank}.wsp"), config=ckpt, device=dev,
                                  host_cache="64M", **kw)

    vocab = transformers.AutoConfig.from_pretrained(ckpt).vocab_size
    mine = [[b[2 * rank:2 * rank + 2]] for b in batches(vocab, dev)]
    if case == "lora":
        model = lora(load(process_group=dist.group.WORLD))
        paged = wt.paged_parameters(model)
        fully_shard(model, mesh=mesh, ignored_params=paged)
        out["norms"], out["digest"] = clipped_steps(model, trainable(model),
                                                    lambda: adapters(model), mine, 1.0)
    elif case == "full":
        model = load(train=True, resident=["model.norm"], process_group=dist.group.WORLD)
        fully_shard(model, mesh=mesh, ignored_params=wt.paged_parameters(model))
        out["norm_sharded"] = type(model.model.norm.weight).__name__
        out["norms"], out["digest"] = clipped_steps(model, wt.parameters(model),
                                                    lambda: masters(model), mine, 1.0)
    elif case == "unshared":
        model = load(train=True, resident=["model.norm"])
        fully_shard(model, mesh=mesh, ignored_params=wt.paged_parameters(model))
        x = mine[0][0]
        try:
            model(x, labels=x).loss.backward()
            out["error"] = ""
        except RuntimeError as e:
            out["error"] = str(e)
    if case in ("lora", "full"):
        one = torch.load(os.path.join(T, "one.pt"), map_location="cpu")[case]
        got = full(adapters(model) if case == "lora" else masters(model))
        out["weights_diff"] = max((p.detach().cpu().float() - one[n].float()).abs().max().item()
                                  for n, p in got) if len(got) == len(one) else float("inf")
    json.dump(out, open(os.path.join(T, f"{case}-{rank}.json"), "w"))
    dist.destroy_process_group()


def main(mode: str) -> None:
    if mode == "cuda" and torch.cuda.device_count() < 2:
        print("SKIP: fewer than two CUDA devices")
        sys.exit(77)
    from checks import check, finish, require
    require("peft")
    try:
        from torch.distributed.fsdp import fully_shard
        import inspect
        if "ignored_params" not in inspect.signature(fully_shard).parameters:
            raise ImportError("no ignored_params")
    except ImportError as e:
        print(f"SKIP: this torch has no fully_shard with ignored_params ({e})")
        sys.exit(77)
    import wspager.torch as wt
    from wspager._ddp import paged_ids
    transformers.logging.set_verbosity_error()
    ckpt = two_packs()
    dev = torch.device("cuda", 0) if mode == "cuda" else torch.device("cpu")
    tol = 1e-6 if mode == "cpu" else 1e-5

    def load(**kw):
        return wt.from_pretrained(os.path.join(T, "rank0.wsp"), config=ckpt, device=dev,
                                  host_cache="64M", **kw)

    def ranks(case: str):
        t0 = time.monotonic()
        res = launch(case, mode, script=__file__)
        print(f"case {case}: {time.monotonic() - t0:.1f} s")
        for r in res:
            check(r is not None, f"{case}: a rank wrote no result")
        return [r for r in res if r is not None]

    def near(r, got, want, what: str) -> None:
        (norms, dig), (want_norms, want_dig) = got, want
        print(f"{what}, rank {r['rank']}: norms {norms} (one process: {want_norms}); "
              f"{'equal' if dig == want_dig else 'different'} weights")
        check(len(norms) == len(want_norms) and
              all(abs(a - b) <= tol * max(abs(b), 1e-3) for a, b in zip(norms, want_norms)),
              f"{what}, rank {r['rank']}: norms {norms}, one process {want_norms}")
        check(r["weights_diff"] <= tol, f"{what}, rank {r['rank']}: weights differ from one "
              f"process's by {r['weights_diff']}")

    vocab = 300
    halves = [[b[:2], b[2:]] for b in batches(vocab, dev)]

    # paged_parameters: the paged placeholders, under peft's wrapper too
    model = lora(load())
    paged = wt.paged_parameters(model)
    want_ids = paged_ids(model.base_model.model._wspager)
    check({id(p) for p in paged} == want_ids and len(paged) > 0,
          f"paged_parameters: {len(paged)} parameters, the pager holds {len(want_ids)}")
    check(not any(p.requires_grad for p in paged), "paged_parameters gave an adapter")
    wt.remove(model.base_model.model)
    try:
        wt.paged_parameters(torch.nn.Linear(2, 2))
        err = ""
    except ValueError as e:
        err = str(e)
    check("no offloaded model" in err, f"paged_parameters of a plain module: {err!r}")

    # LoRA, then full fine-tuning: one process on the global batch
    model = lora(load())
    want = clipped_steps(model, trainable(model), lambda: adapters(model), halves, 0.5)
    want_lora = dict(adapters(model))
    wt.remove(model.base_model.model)
    model = load(train=True, resident=["model.norm"])
    want_full_steps = clipped_steps(model, wt.parameters(model), lambda: masters(model),
                                    halves, 0.5)
    want_full = dict(masters(model))
    wt.remove(model)
    torch.save({"lora": want_lora, "full": want_full}, os.path.join(T, "one.pt"))
    for case, wanted in (("lora", want), ("full", want_full_steps)):
        for r in ranks(case):
            near(r, (r["norms"], r["digest"]), wanted, case)
            if case == "full":
                check(r["norm_sharded"] == "DTensor", f"full, rank {r['rank']}: FSDP2 left "
                      f"the resident norm a {r['norm_sharded']}")

    for r in ranks("unshared"):
        print(f"unshared, rank {r['rank']}: {r['error'][:160]}...")
        check("process_group=" in r["error"] and "FSDP" in r["error"],
              f"unshared, rank {r['rank']}: train=True under FSDP2 without a process group: "
              f"{r['error']!r}")
    finish()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
