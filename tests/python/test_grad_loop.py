"""The training loop people write, through the pager: after backward the
masters' .grad are there (issue: they appeared only inside step), so
torch.nn.utils.clip_grad_norm_ clips; micro-batches accumulate into .grad;
zero_grad(set_to_none=True and False) starts over; parameters kept
resident (``resident=``) train on the device beside the masters.  With
the optimizer over ``wt.parameters(model)`` and over the model's own
``model.parameters()`` (paged ones stepped as their masters).  Against
the resident model trained by the same loop: gradients after each backward
and weights after each step bit-identical (CPU fp32, the host backend).
argv[1]: "cpu" (exactness asserted) or "cuda" (the gradients before the
first step asserted exact, the rest's distance printed: after a step the
host's optimizer and the GPU's need not give the same bits)."""
import os
import sys

import torch
import transformers

import wspager.torch as wt
from checks import check, finish
from configs import llama

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
exact = device == "cpu"
torch.manual_seed(0)
d = os.path.join(T, "llama")
transformers.LlamaForCausalLM(llama(64, 2, 256)).save_pretrained(d)
# Tensors of 64 KiB and more (here every matrix) leave through the pager's
# landing ring, the later micro-batch's added as it lands; the small
# model's through its staging buffers.
wide = os.path.join(T, "llama-wide")
transformers.LlamaForCausalLM(llama(192, 2, 256)).save_pretrained(wide)
def distance(a, b):
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


batches = [torch.randint(0, 256, (2, 12), device=device) for _ in range(8)]


def run(resident, plain=False, path=d):
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    model = wt.from_pretrained(path, device=device, host_cache="32M", train=True, resident=resident)
    ref.train()
    model.train()
    # plain: the optimizer over model.parameters(), as the plain loop (and
    # transformers' Trainer) builds it; else over wspager's masters
    named = list(model.named_parameters()) if plain else wt.named_parameters(model)
    masters = [p for _, p in named]
    names = [n for n, _ in named]
    ref_params = dict(ref.named_parameters())
    check(names == [n for n, _ in ref.named_parameters()],
          f"wt.parameters order {names[:4]}... is not model.parameters() order")
    # resident parameters go to the optimizer as they are (the model's own)
    own = dict(model.named_parameters())
    res = [n for n in names if n.startswith(tuple(r + "." for r in resident))]
    check(len(res) == len(resident) and all(m is own[n] for n, m in zip(names, masters)
                                            if n in res),
          f"resident={resident}: {res} are not the model's own parameters")
    opt = torch.optim.AdamW(masters, lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    worst = unstepped = 0.0   # unstepped: gradients before any step (the same weights)
    for step in range(4):
        for micro in range(2):           # gradient accumulation over two micro-batches
            ids = batches[2 * step + micro]
            ref(ids, labels=ids).loss.backward()
            model(ids, labels=ids).loss.backward()
            # .grad is there right after backward, equal to the resident model's
            missing = [n for n, m in zip(names, masters) if m.grad is None]
            check(not missing, f"step {step}.{micro}: .grad None after backward: {missing[:3]}")
            if missing:
                break
            dist = max(distance(m.grad, ref_params[n].grad) for n, m in zip(names, masters))
            worst = max(worst, dist)
            if step == 0:
                unstepped = max(unstepped, dist)
            check(dist == 0 or not exact, f"step {step}.{micro}: gradients differ by {dist}")
        norm_ref = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        norm = torch.nn.utils.clip_grad_norm_(masters, 0.5)
        check(norm_ref.item() > 0.5, f"the clip is not active (norm {norm_ref.item()})")
        check(norm.item() == norm_ref.item() or not exact,
              f"step {step}: global norm {norm.item()} != {norm_ref.item()}")
        opt_ref.step()
        opt.step()
        # set_to_none both ways: each must start the next accumulation over
        opt_ref.zero_grad(set_to_none=step % 2 == 0)
        opt.zero_grad(set_to_none=step % 2 == 0)
        sd, rsd = model.state_dict(), ref.state_dict()
        dist = max(distance(sd[k], rsd[k]) for k in rsd)
        worst = max(worst, dist)
        check(dist == 0 or not exact, f"step {step}: weights differ by {dist}")
        changed = [n for n in resident if not torch.equal(sd[n + ".weight"].cpu(),
                                                          first[n + ".weight"].cpu())]
        check(step == 0 or len(changed) == len(resident), f"resident parameters did not train: "
              f"{sorted(set(resident) - set(changed))}")
    # Before the first step both models hold the same weights and run the
    # same kernels: their gradients, the added micro-batch's too, are the
    # same bits on either device (after a step, a host optimizer's weights
    # and a GPU one's need not be).
    check(unstepped == 0, f"{os.path.basename(path)}: gradients before any step differ by "
                          f"{unstepped}")
    print(f"{device}, {os.path.basename(path)}, resident={list(resident)}, optimizer over "
          f"{'model.parameters()' if plain else 'wt.parameters(model)'}: 4 steps of 2 "
          f"micro-batches with clipping, worst max|diff| {worst}; the first step's gradients "
          f"(both micro-batches, the weights still the same) {unstepped}")
    wt.remove(model)


first = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).state_dict()
run(())
run(("model.norm", "lm_head"))
run((), plain=True)
run(("model.norm", "lm_head"), plain=True)
run((), path=wide)
finish()
