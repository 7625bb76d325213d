"""An fp16 model trained through the pager: its gradients leave the device
in fp16 and reach the fp32 masters' .grad exactly.  After one backward each
.grad is the resident fp16 model's .grad widened, bit for bit; after a
second micro-batch it is the fp32 sum of the two micro-batches' widened
gradients (one fp32 rounding, as the pager adds), where the resident
model, accumulating in fp16, would round at each add.  Tensors of 64 KiB
and more go through the landing ring (hidden 192: every matrix), the
others through staging buffers.  argv[1]: "cpu" or "cuda"."""
import os

import torch
import transformers

import wspager.torch as wt
from checks import check, device_arg, exact_attention, finish
from configs import llama

T = os.environ["WSP_TEST_TMP"]
device = device_arg()
exact_attention(device)
torch.manual_seed(0)
d = os.path.join(T, "llama-f16")
transformers.LlamaForCausalLM(llama(192, 2, 256)).to(torch.float16).save_pretrained(d)
batches = [torch.randint(0, 256, (2, 12), device=device) for _ in range(2)]

ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float16).to(device)
one = []   # each micro-batch's resident gradients, widened
for ids in batches:
    ref.zero_grad(set_to_none=True)
    ref(ids, labels=ids).loss.backward()
    one.append({n: p.grad.float() for n, p in ref.named_parameters()})
check(all(g.dtype == torch.float16 for g in (p.grad for p in ref.parameters())),
      "the resident model's gradients are not fp16")

model = wt.from_pretrained(d, device=device, host_cache="32M", train=True)
named = wt.named_parameters(model)
check(all(m.dtype == torch.float32 for _, m in named), "the masters are not fp32")
finite = 0
for k, ids in enumerate(batches):
    model(ids, labels=ids).loss.backward()
    for n, m in named:
        want = one[0][n] if k == 0 else one[0][n] + one[1][n]
        got = m.grad.detach().to(want.device)
        check(torch.equal(got.view(torch.int32), want.view(torch.int32)), f"micro-batch {k}: {n}: .grad differs from the resident fp16 gradients "
              f"widened{' and summed in fp32' if k else ''} (max |diff| "
              f"{(got - want).abs().max().item():.3g})")
        finite += int(torch.isfinite(got).all())
check(finite > 0, "no finite gradient at all: the comparison would be vacuous")
print(f"{len(named)} tensors, 2 micro-batches: .grad equal bit for bit ({device})")
finish()
