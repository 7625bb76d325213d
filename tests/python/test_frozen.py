"""Paged weights keep the requires_grad transformers gives them, and take
no gradient without train=True.  torch.matmul chooses its algorithm by a
weight's requires_grad, even under no_grad, so the flag is part of running
a model exactly as transformers does (tests/python/test_families.py has
the families where that shows).  Checked on a Llama, against transformers'
own load of the same checkpoint:

* after from_pretrained every parameter's requires_grad is transformers';
* a forward and backward with gradients on (a loss on inputs_embeds, as
  attribution does): the input's gradient is that of transformers' model
  with its weights frozen but those the offloaded model keeps as ordinary
  tensors (a small layer: the final norm), no paged weight gets a .grad,
  the kept ones get transformers' gradients, and afterwards each paged
  weight has its flag back;
* frozen by the user (requires_grad_(False), as peft freezes a base), the
  flags stay off and a forward is that of the frozen transformers model.

argv[1]: "cpu" (host backend) or "cuda"."""
import os

import torch
import transformers

import wspager.torch as wt
from checks import check, device_arg, finish
from configs import llama

T = os.environ["WSP_TEST_TMP"]
device = device_arg()
transformers.logging.set_verbosity_error()
print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")
torch.manual_seed(0)
d = os.path.join(T, "llama")
transformers.AutoModelForCausalLM.from_config(llama(64, 2, 256)).save_pretrained(d)
ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(device)
model = wt.from_pretrained(d, device=device, dtype=torch.float32)
flags = {n: p.requires_grad for n, p in ref.named_parameters()}
ours = {n: p.requires_grad for n, p in model.named_parameters()}
check(ours == flags, f"requires_grad differs from transformers': "
      f"{sorted(n for n in flags if ours.get(n) != flags[n])}")
paged = [p for g in model._wspager.groups for p, _, _, _ in g.params]
check(paged and all(p.requires_grad for p in paged), "paged weights are not trainable as loaded")

# gradients on: the input's gradient, no weight's
ids = torch.randint(0, 256, (2, 12), device=device)


def input_grad(m):
    x = m.get_input_embeddings()(ids).detach().requires_grad_(True)
    m(inputs_embeds=x).logits.float().pow(2).mean().backward()
    return x.grad


paged_ids = {id(p) for p in paged}
kept = {n: p for n, p in model.named_parameters() if id(p) not in paged_ids}
check("model.norm.weight" in kept, "the final norm is paged (a small layer is kept)")
for n, p in ref.named_parameters():
    p.requires_grad_(n in kept)
want = input_grad(ref)
got = input_grad(model)
check(torch.equal(got, want), f"input gradient differs (max "
      f"{(got - want).abs().max().item():.3g})")
check(all(p.grad is None for p in paged), "a paged weight got a gradient without train=True")
refs = dict(ref.named_parameters())
for n, p in kept.items():
    check(p.grad is not None and torch.equal(p.grad, refs[n].grad),
          f"kept parameter {n}: gradient differs from transformers'")
check(all(p.requires_grad for p in paged), "paged weights did not get their flag back")

# frozen by the user: stays frozen, runs as frozen transformers does
for p in model.parameters():
    p.requires_grad_(False)
with torch.no_grad():
    want, got = ref(ids).logits, model(ids).logits
check(torch.equal(got, want), "a frozen model's logits differ from frozen transformers'")
check(not any(p.requires_grad for p in model.parameters()), "a frozen weight was unfrozen")
with torch.enable_grad():
    x = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    model(inputs_embeds=x).logits.sum().backward()
check(not any(p.requires_grad for p in model.parameters()),
      "a frozen weight was unfrozen by a forward with gradients")
wt.remove(model)
finish()
