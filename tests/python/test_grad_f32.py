"""Gradients that leave the device as fp32 (wspager._gradsplit): a bf16
model trained through the pager with every eligible gradient pushed as fp32,
with half of them, and with none (WSPAGER_GRAD_F32_SHARE fixes the share)
has the same .grad after each backward and the same weights after each step,
bit for bit (a widening is exact, wherever it runs), through the loop people
write: two micro-batches, clipping, zero_grad both ways.  The bytes copied
out (the pager's stats) show the fp32 pushes happened.  On cuda, without the
variable, the share is measured while running: it moves, and training gives
the same bits again.  And the share's rule: it rises when the widening left
after a backward waited longer than the copies, falls when the copies did.
argv[1]: "cpu" or "cuda"."""
import os

import torch
import transformers

import wspager.torch as wt
from checks import check, device_arg, finish
from configs import llama
from wspager._gradsplit import STEP, F32Share

T = os.environ["WSP_TEST_TMP"]
device = device_arg()
if device == "cuda":
    # runs compared bit for bit: attention's math kernels (the fused
    # backwards accumulate with atomics, in no fixed order)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
torch.manual_seed(0)
d = os.path.join(T, "llama")
# hidden 128: every projection is at least 64 KiB of fp32, so it may go as fp32
transformers.LlamaForCausalLM(llama(128, 2, 256)).to(torch.bfloat16).save_pretrained(d)
batches = [torch.randint(0, 256, (2, 12), device=device) for _ in range(6)]


def run(share):
    """.grad after each backward and the state after each step; the bytes
    copied out and the share at the end."""
    if share is None:
        os.environ.pop("WSPAGER_GRAD_F32_SHARE", None)
    else:
        os.environ["WSPAGER_GRAD_F32_SHARE"] = str(share)
    model = wt.from_pretrained(d, device=device, host_cache="32M", train=True)
    model.train()
    masters = wt.parameters(model)
    opt = torch.optim.AdamW(masters, lr=1e-2)
    grads, states = [], []
    for step in range(3):
        for micro in range(2):
            ids = batches[2 * step + micro]
            model(ids, labels=ids).loss.backward()
            grads.append([m.grad.clone() for m in masters])
        torch.nn.utils.clip_grad_norm_(masters, 0.5)
        opt.step()
        opt.zero_grad(set_to_none=step % 2 == 0)
        states.append({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
    off = model._wspager
    out = (grads, states, int(off.pager.stats()["bytes_d2h"]), off.trainer.split.share)
    wt.remove(model)
    return out


def same(a, b, what):
    ga, sa, _, _ = a
    gb, sb, _, _ = b
    for k, (x, y) in enumerate(zip(ga, gb)):
        bad = [i for i, (u, v) in enumerate(zip(x, y)) if not torch.equal(u, v)]
        check(not bad, f"{what}: backward {k}: .grad of {len(bad)} masters differ")
    for k, (x, y) in enumerate(zip(sa, sb)):
        bad = [n for n in x if not torch.equal(x[n], y[n])]
        check(not bad, f"{what}: step {k}: weights differ: {bad[:3]}")


none, half, every = run(0.0), run(0.5), run(1.0)
same(none, half, "share 0.5 against 0")
same(none, every, "share 1 against 0")
print(f"{device}: bytes out with share 0 / 0.5 / 1: {none[2]} / {half[2]} / {every[2]}")
check(none[2] < half[2] < every[2] and every[2] > 1.6 * none[2],
      "the bytes copied out do not show fp32 pushes")
if device == "cuda":
    measured = run(None)
    same(none, measured, "the measured share against 0")
    print(f"measured share after 6 backwards: {measured[3]}")
    check(measured[3] != 0.5, "the measured share never moved")

# The rule, alone.
os.environ.pop("WSPAGER_GRAD_F32_SHARE", None)
s = F32Share(1 << 30, True)
s.observe(0.010, 0.030)
check(abs(s.share - (0.5 + STEP)) < 1e-9, f"the widening waited longer: share {s.share}")
s.observe(0.030, 0.010)
s.observe(0.030, 0.010)
check(abs(s.share - (0.5 - STEP)) < 1e-9, f"the copies waited longer: share {s.share}")
for _ in range(40):
    s.observe(0.0, 1.0)
check(s.share == 1.0, f"the share passes 1: {s.share}")
s = F32Share(1 << 30, False)
s.observe(0.0, 1.0)
check(s.share == 0.5 and not s.pick(torch.zeros(1 << 16, dtype=torch.bfloat16)),
      "a disabled share moved or picked")
finish()
