"""Routed experts train (train=True on a mixture-of-experts model): each
routed expert's gradient leaves through the pager as any paged weight's,
wspager.torch.parameters() gives every expert's fp32 master in place of the
stacked parameter, and an expert no token was routed to gets a zero
gradient (the resident model's stacked parameter has one for every expert,
and its optimizer steps them all).  Against the resident Mixtral (default
experts implementation) trained by the same AdamW loop: the losses, the
gradients of the routed experts and the weights after every step are
bit-identical on the CPU (distance printed on CUDA).
argv[1]: "cpu" or "cuda"."""
import os

import torch
import transformers

import wspager.torch as wt
from checks import check, device_arg, finish
from configs import mixtral

T = os.environ["WSP_TEST_TMP"]
device = device_arg()
exact = device == "cpu"
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
d = os.path.join(T, "mixtral")
transformers.MixtralForCausalLM(mixtral(64, 2, 256)).save_pretrained(d)
ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(device)
model = wt.from_pretrained(d, device=device, host_cache="64M", train=True)
ref.train()
model.train()
masters = wt.parameters(model)
n_ref = sum(p.numel() for p in ref.parameters())
n = sum(p.numel() for p in masters)
check(n == n_ref, f"parameters() hold {n} values, the resident model {n_ref}")
opt = torch.optim.AdamW(masters, lr=1e-2)
opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
batches = [torch.randint(0, 256, (1, 6), device=device) for _ in range(4)]


def distance(a, b):
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


worst = 0.0
for step, ids in enumerate(batches):
    want = ref(ids, labels=ids).loss
    got = model(ids, labels=ids).loss
    check(torch.equal(want, got) or not exact, f"step {step}: loss {got.item()} != {want.item()}")
    worst = max(worst, abs(want.item() - got.item()))
    want.backward()
    got.backward()
    opt_ref.step()
    opt.step()
    opt_ref.zero_grad()
    opt.zero_grad()
    sd, rsd = model.state_dict(), ref.state_dict()
    dist = max(distance(sd[k], rsd[k]) for k in rsd)
    worst = max(worst, dist)
    bad = [k for k in rsd if distance(sd[k], rsd[k]) > 0]
    check(dist == 0 or not exact, f"step {step}: weights differ by {dist} ({bad[:4]})")
first = transformers.AutoModelForCausalLM.from_pretrained(d).state_dict()
moved = [k for k, v in model.state_dict().items() if "experts" in k and
         not torch.equal(v.cpu(), first[k])]
check(len(moved) == 4, f"expert parameters that trained: {moved}")
print(f"{device}: 4 AdamW steps of a Mixtral with 8 experts, worst max|diff| {worst}")
wt.remove(model)

# A stacked experts parameter has no master (each expert trains as a layer
# of its own): an optimizer over model.parameters() is refused at its
# first step, naming what to build it over, before it steps anything.
model = wt.from_pretrained(d, device=device, host_cache="64M", train=True)
before = {k: v.clone() for k, v in model.state_dict().items()}
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
model(batches[0], labels=batches[0]).loss.backward()
try:
    opt.step()
    check(False, "an optimizer over the stacked experts parameters stepped")
except RuntimeError as e:
    print(f"optimizer over model.parameters() of a MoE: {e}")
    check("wspager.torch.parameters(model)" in str(e), f"message: {e}")
after = model.state_dict()
check(all(torch.equal(before[k], after[k]) for k in before), "a refused step changed weights")
wt.remove(model)
finish()
