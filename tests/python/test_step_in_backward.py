"""wspager.torch.step_in_backward: each paged layer is stepped on the
model's device inside the backward, by a torch optimizer over fp32
masters that live in host memory between steps.  Against the same
optimizer over the resident model on the same device (torch.optim.AdamW
with its defaults there: foreach kernels on CUDA, the per-tensor loop on
the CPU), ten steps give the same loss at every step and the pack
wt.save writes unpacks to exactly the resident model's weights, for tiny
and mid-size Llama and GPT-2 (tied embeddings), fp32.  No gradient goes
through the pager's write-back path.  Also the errors: mixing it with
host masters, a class that is not an optimizer, an argument the
optimizer refuses.  With ``clip_per_layer`` each layer's gradients are
clipped to its own norm: the same as the resident model clipped per pack
layer.
argv[1]: "cpu" (host backend) or "cuda"."""
import os
import sys

import torch
import transformers

import wspager
import wspager.torch as wt
from configs import gpt2, llama
from checks import check, finish

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")
from safetensors.torch import load_file   # noqa: E402  (after the skip)


def unpacked(pack):
    out = pack + ".st"
    wspager.Pack(pack).unpack(out)
    got = {}
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            got.update(load_file(os.path.join(out, f)))
    return got


CASES = [
    ("llama-tiny", llama(64, 2, 256)),
    ("llama-mid", llama(256, 6, 2048, heads=8)),
    ("gpt2-tiny", gpt2(64, 2, 256)),
    ("gpt2-mid", gpt2(256, 6, 2048, heads=8)),
]

for name, cfg in CASES:
    tag = f"devstep-{name}"
    torch.manual_seed(0)
    cls = transformers.AutoModelForCausalLM
    ref = cls.from_config(cfg).float().eval()   # dropout off: the same function
    d = os.path.join(T, tag)
    ref.save_pretrained(d)
    pack = d + ".wsp"
    wspager.convert(d, pack)
    ref = ref.to(device)
    model = cls.from_config(cfg).float().eval()
    wt.offload(model, pack, device=device, host_cache="64M", gpu_slots=3, train=True)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    opt = wt.step_in_backward(model, torch.optim.AdamW, lr=1e-3)
    same_loss, same_logits = True, True
    for step in range(10):
        ids = torch.randint(0, cfg.vocab_size, (2, 24), device=device)
        want, got = ref(ids, labels=ids), model(ids, labels=ids)
        same_loss &= torch.equal(want.loss, got.loss)
        same_logits &= torch.equal(want.logits, got.logits)
        want.loss.backward()
        got.loss.backward()
        opt_ref.step()
        opt.step()
        opt_ref.zero_grad()
        opt.zero_grad()
    check(same_loss and same_logits, f"{tag}: losses or logits differ during training")
    st = model._wspager.pager.stats()
    check(st["grad_pushes"] == 0 and st["bytes_d2h"] == 0,
          f"{tag}: {st['grad_pushes']} gradients went through the write-back path")
    check(st["updated_layers"] > 0, f"{tag}: no layer updated")
    left = [n for n, p in model.named_parameters() if p.grad is not None]
    check(not left, f"{tag}: .grad left on {left[:3]}")
    out = os.path.join(T, tag + "-tuned.wsp")
    wt.save(model, out)
    got = unpacked(out)
    want_sd = {k: v.detach().cpu() for k, v in ref.state_dict().items()}
    differ = [k for k, v in got.items() if k in want_sd and not torch.equal(v, want_sd[k])]
    orig = load_file(os.path.join(d, "model.safetensors"))
    moved = [k for k, v in got.items() if not torch.equal(v, orig[k])]
    check(got and not differ, f"{tag}: after 10 steps the saved pack differs for {differ[:3]}")
    check(len(moved) == len(got), f"{tag}: {len(got) - len(moved)} tensors did not change")
    print(f"{tag}: 10 steps on {device} inside the backward, same losses and logits "
          f"{same_loss and same_logits}; saved pack: {len(got)} tensors, {len(differ)} differ "
          f"from resident training")

    # Errors, each with what to do.
    for what, call, exc in (
            ("host masters after", lambda: wt.parameters(model), ValueError),
            ("not an optimizer", lambda: wt.step_in_backward(model, object), TypeError)):
        try:
            call()
            check(False, f"{tag}: {what}: no error")
        except exc as e:
            print(f"{tag}: {what}: {e}")
    wt.remove(model)

# clip_per_layer: each layer's gradients clipped to its own norm before its
# step; the resident reference clips the same groups (the pack's layers,
# their tensors in the same order) before the same AdamW.
cfg = CASES[1][1]
pack = os.path.join(T, "devstep-llama-mid.wsp")
torch.manual_seed(0)
ref = cls.from_config(cfg).float().eval()
ref.load_state_dict(unpacked(pack))
ref = ref.to(device)
model = cls.from_config(cfg).float().eval()
wt.offload(model, pack, device=device, host_cache="64M", gpu_slots=3, train=True)
params = dict(ref.named_parameters())
groups = [[params[name] for _, name, _, _ in g.params] for g in model._wspager.groups]
opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
opt = wt.step_in_backward(model, torch.optim.AdamW, lr=1e-3, clip_per_layer=0.01)
same, clipped = True, 0
for step in range(5):
    ids = torch.randint(0, cfg.vocab_size, (2, 24), device=device)
    want, got = ref(ids, labels=ids), model(ids, labels=ids)
    same &= torch.equal(want.loss, got.loss)
    want.loss.backward()
    got.loss.backward()
    for ps in groups:
        clipped += torch.nn.utils.clip_grad_norm_(ps, 0.01).item() > 0.01
    opt_ref.step()
    opt.step()
    opt_ref.zero_grad()
with torch.no_grad():
    ids = torch.randint(0, cfg.vocab_size, (2, 24), device=device)
    same &= torch.equal(ref(ids).logits, model(ids).logits)
print(f"clip_per_layer=0.01: 5 steps, {clipped} layer clips active; same losses and logits {same}")
check(clipped > 0, "clip_per_layer: no clip was active; the check proves nothing")
check(same, "clip_per_layer: training differs from the resident model clipped per layer")
for bad in (0, -1.0):
    try:
        wt.step_in_backward(model, torch.optim.AdamW, clip_per_layer=bad)
        check(False, f"clip_per_layer={bad} taken")
    except ValueError:
        pass
wt.remove(model)

other = cls.from_config(CASES[0][1]).float().eval()
wt.offload(other, os.path.join(T, "devstep-llama-tiny.wsp"), device=device, train=True)
try:
    wt.step_in_backward(other, torch.optim.AdamW, lr=-1.0)
    check(False, "a negative learning rate was taken")
except ValueError as e:
    print(f"negative lr: {e}")
wt.parameters(other)
try:
    wt.step_in_backward(other, torch.optim.AdamW, lr=1e-3)
    check(False, "step_in_backward after parameters(): no error")
except ValueError as e:
    print(f"after parameters(): {e}")
wt.remove(other)
finish()
