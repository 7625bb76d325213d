"""Gradients that leave the device as fp32 (wspager._gradsplit): a bf16
model trained through the pager with every eligible gradient pushed as fp32,
with half of them, and with none (WSPAGER_GRAD_F32_SHARE fixes the share)
has the same .grad after each backward and the same weights after each step,
bit for bit (a widening is exact, wherever it runs), through the loop people
write: two micro-batches, clipping, zero_grad both ways.  The bytes copied
out (the pager's stats) show the fp32 pushes happened, in the backwards that
start from zeroed accumulators only.  On cuda, without the variable, the
share is found while running, and training gives the same bits again.  And
the share's rule: on in one direction while backwards get faster, back when
one is slower, within 0 and 1.  argv[1]: "cpu" or "cuda"."""
import os

import torch
import transformers

import wspager
import wspager.torch as wt
from checks import check, device_arg, exact_attention, finish
from configs import llama
from wspager._gradsplit import START, STEP, WINDOW, F32Share

T = os.environ["WSP_TEST_TMP"]
device = device_arg()
exact_attention(device)
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
    split = off.trainer.split
    out = (grads, states, int(off.pager.stats()["bytes_d2h"]), split.share, len(split.window))
    if share == 0.0:
        misuse(off.pager)
    wt.remove(model)
    return out


def misuse(pager):
    """Bad arguments to grad_push_f32 raise; none reaches the library as a
    wrapped integer."""
    n = len(pager.pack.layers[1].tensors)
    for args, exc in (((1, "no.such.tensor", 0), KeyError), ((1, -1, 0), ValueError),
                      ((1, 1.5, 0), TypeError), ((1, 0, -8), ValueError),
                      ((10 ** 6, 0, 0), wspager.WspError), ((1, n, 8), wspager.WspError),
                      ((1, 0, 0), wspager.WspError)):   # a NULL gradient
        try:
            pager.grad_push_f32(*args)
            check(False, f"grad_push_f32{args} did not raise")
        except exc as e:
            print(f"grad_push_f32{args}: {type(e).__name__}: {e}")
        except Exception as e:
            check(False, f"grad_push_f32{args} raised {type(e).__name__}, not {exc.__name__}: {e}")


def same(a, b, what):
    ga, sa = a[:2]
    gb, sb = b[:2]
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
# Two of the six backwards start from zeroed accumulators (the first, and
# the one after zero_grad(set_to_none=True)); the others add to .grad.
check(none[2] < half[2] < every[2] and every[2] > 1.2 * none[2],
      "the bytes copied out do not show fp32 pushes")
if device == "cuda":
    measured = run(None)
    same(none, measured, "the measured share against 0")
    print(f"measured: share {measured[3]:.2f} after {measured[4]} judged backwards (window "
          f"{WINDOW}), {measured[2]} bytes out")
    check(measured[4] == 2, f"the measured share judged {measured[4]} backwards, not the 2 "
          f"that started from zeroed accumulators")
    # It starts at START: no fp32 before its first window is judged.
    check(measured[2] > none[2] if START > 0 else measured[2] == none[2],
          f"the measured share, at its start {START}, sent {measured[2]} bytes, "
          f"share 0 {none[2]}")

# The rule, alone: a step a window of WINDOW backwards, judged by their
# median (one slow backward in a window moves nothing the wrong way).
os.environ.pop("WSPAGER_GRAD_F32_SHARE", None)


def window(s, seconds, outlier=False):
    """One window of backwards taking `seconds` (one of them 10x slower)."""
    for k in range(WINDOW):
        before = s.share
        s.judge(seconds * 10 if outlier and k == 0 else seconds)
        if k < WINDOW - 1:
            check(s.share == before, "the share moved inside a window")


s = F32Share(1 << 30, True)
steps = [s.share]
for seconds, outlier in ((0.100, False), (0.090, True), (0.080, False), (0.095, False),
                         (0.090, True), (0.200, False)):
    window(s, seconds, outlier)
    steps.append(s.share)
want = [START + k * STEP for k in (0, 1, 2, 3, 2, 1, 2)]
check(all(abs(a - b) < 1e-9 for a, b in zip(steps, want)),
      f"faster: on; slower: back: {steps}, want {want}")
s = F32Share(1 << 30, True)
for k in range(40):
    window(s, 1.0 - k * 0.01)      # faster each time: on, up to 1
check(s.share == 1.0, f"the share passes 1: {s.share}")
for k in range(41):
    window(s, 1.0 + k * 0.01)      # slower each time: back and forth
check(0.0 <= s.share <= 1.0, f"the share left [0, 1]: {s.share}")
big = torch.zeros(1 << 16, dtype=torch.bfloat16)
check(not F32Share(1 << 30, True).pick(big, fresh=False),
      "a gradient added to an earlier push went as fp32")
s = F32Share(1 << 30, False)
s.begin()
s.end(True)
check(s.share == START and not s.pick(big, fresh=True), "a disabled share moved or picked")
# While the pager times who decodes, the share holds and judges nothing;
# after, its windows start afresh (no window straddles the trial, none
# compared with one from before it).
s = F32Share(1 << 30, True)
window(s, 0.100)
window(s, 0.090)
held = s.share
for _ in range(3 * WINDOW + 1):
    s.begin()
    s.end(True, hold=True)
check(s.share == held and s.window == [] and s.last is None,
      f"the share moved or kept a window during the decode trial: {s.share}, {s.window}")
window(s, 0.200)   # slower than before the trial: not compared with it
check(s.share == held + STEP, f"a window after the trial was judged against one before: "
      f"{s.share}, want {held + STEP}")
finish()
