"""wspager.torch.from_pretrained: the model is built from config.json with
no weights in memory, the checkpoint is converted to DIR.wsp beside it once
and reused while up to date, and the result computes exactly what the
resident model computes.  argv[1]: "cpu" or "cuda"."""
import os
import sys
import time

import torch
import transformers

import wspager.torch as wt
from checks import check, finish

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
torch.manual_seed(0)
d = os.path.join(T, "llama")
transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
# the resident reference: transformers' own loader (rotary buffers in fp32)
ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).to(device).eval()
ids = torch.randint(0, 512, (2, 16), device=device)
with torch.no_grad():
    want = ref(ids).logits
    want_gen = ref.generate(ids[:1], max_new_tokens=16, do_sample=False, min_new_tokens=16)

notes = []
model = wt.from_pretrained(d, device=device, host_cache="32M", log=notes.append)
pack = d + ".wsp"
check(os.path.isfile(os.path.join(pack, "manifest.wspm")), "no pack beside the checkpoint")
stamp = os.path.getmtime(os.path.join(pack, "manifest.wspm"))
# no weight was ever materialised: every parameter is a one-element
# placeholder, but the final norm's (a small layer kept on the device:
# tests/python/test_small.py)
kept = "model.norm.weight"
for name, p in model.named_parameters():
    if name != kept:
        check(p.untyped_storage().nbytes() <= p.element_size(),
              f"{name} holds {p.untyped_storage().nbytes()} bytes")
    check(p.device.type == device, f"{name} on {p.device}")
check(model.dtype == torch.bfloat16, f"model dtype {model.dtype}")
# and the placeholders of one dtype share one scalar: one fill (on CUDA a
# launch, slow while the host tier is page-locked), not one a parameter
placeholders = [p for name, p in model.named_parameters() if name != kept]
scalars = {p.untyped_storage().data_ptr() for p in placeholders}
check(len(scalars) == len({p.dtype for p in placeholders}),
      f"{len(scalars)} placeholder storages for {len(placeholders)} parameters")
with torch.no_grad():
    got = model(ids).logits
    got_gen = model.generate(ids[:1], max_new_tokens=16, do_sample=False, min_new_tokens=16)
check(torch.equal(got, want), f"logits differ: max {(got.float() - want.float()).abs().max().item()}")
check(torch.equal(got_gen, want_gen), "generate differs")
wt.remove(model)

# reused while up to date ...
time.sleep(1.1)
model = wt.from_pretrained(d, device=device, host_cache="32M")
check(os.path.getmtime(os.path.join(pack, "manifest.wspm")) == stamp, "pack converted again")
wt.remove(model)
# ... converted again when the checkpoint is newer
os.utime(os.path.join(d, "model.safetensors"))
model = wt.from_pretrained(d, device=device, host_cache="32M")
check(os.path.getmtime(os.path.join(pack, "manifest.wspm")) > stamp, "stale pack not converted again")
with torch.no_grad():
    check(torch.equal(model(ids).logits, want), "logits differ after reconversion")
wt.remove(model)
# a pack needs its config
try:
    wt.from_pretrained(pack, device=device)
    check(False, "a pack without config= accepted")
except ValueError as e:
    check("config=" in str(e), f"message: {e}")
model = wt.from_pretrained(pack, device=device, config=d)
with torch.no_grad():
    check(torch.equal(model(ids).logits, want), "from a pack: logits differ")
wt.remove(model)

# The pager opens while transformers builds the model (on a thread, from
# the meta probe's plan), and offload takes that one rather than opening
# another; where the load fails after it opened, it is closed.
import threading  # noqa: E402
from wspager import _hf  # noqa: E402

opened = []
open_pagers, skeleton = wt._open_pagers, _hf.skeleton


def counting(*a, **k):
    pagers = open_pagers(*a, **k)
    opened.append((threading.current_thread() is threading.main_thread(), pagers))
    return pagers


wt._open_pagers = counting
model = wt.from_pretrained(pack, device=device, config=d, host_cache="32M")
check([main for main, _ in opened] == [False], f"pagers opened (on the main thread?): "
      f"{[main for main, _ in opened]}")
check(opened and model._wspager.pagers == opened[0][1], "offload did not take the early pager")
with torch.no_grad():
    check(torch.equal(model(ids).logits, want), "early pager: logits differ")
wt.remove(model)
for failing, kwargs in (("skeleton", {}), ("on_demand", {"on_demand": ["no.such.module"]})):
    opened.clear()
    if failing == "skeleton":
        def broken(*a, **k):
            raise RuntimeError("skeleton failed")
        _hf.skeleton = broken
    try:
        wt.from_pretrained(pack, device=device, config=d, host_cache="32M", **kwargs)
        check(False, f"{failing}: the load did not fail")
    except (RuntimeError, wt.MismatchError) as e:
        check(failing in str(e) or "on_demand" in str(e), f"{failing}: message {e}")
    finally:
        _hf.skeleton = skeleton
    for _, pagers in opened:
        for pg in pagers:
            try:
                pg.stats()
                check(False, f"{failing}: a pager opened for the failed load is still open")
            except Exception:
                pass
wt._open_pagers = open_pagers
finish()
