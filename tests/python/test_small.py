"""Small layers (a final norm) are kept on the device, not paged
(offload's keep_small): a slot each would cost a fill and a visit at every
use.  Checked on a Llama against transformers' own load of the same
checkpoint:

* by default model.norm is an ordinary tensor on the device, not a paged
  parameter, and a forward acquires one layer fewer than with
  keep_small=False, which pages it; logits and greedy generate equal
  transformers' in both;
* with train=True it stays paged (it trains through the pager's masters);
* the rule itself on made-up layer sizes: at most 1/256 of the largest
  layer each, smallest first, at most 1/16 of it together, layers read on
  demand left alone.

argv[1]: "cpu" (host backend) or "cuda"."""
import os
from types import SimpleNamespace

import torch
import transformers

import wspager.torch as wt
from wspager import _plan
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
ids = torch.randint(0, 256, (2, 12), device=device)
with torch.no_grad():
    want = ref(ids).logits
    want_gen = ref.generate(ids[:1, :4], max_new_tokens=8, do_sample=False)


def paged_names(model):
    return {g.name for g in model._wspager.groups}


def acquires_a_forward(model):
    pg = model._wspager.pagers[0]
    before = pg.stats()["acquires"]
    with torch.no_grad():
        logits = model(ids).logits
    return pg.stats()["acquires"] - before, logits


models = {}
for keep in (True, False):
    model = wt.from_pretrained(d, device=device, dtype=torch.float32, keep_small=keep)
    n, got = acquires_a_forward(model)
    check(torch.equal(got, want), f"keep_small={keep}: logits differ (max "
          f"{(got - want).abs().max().item():.3g})")
    with torch.no_grad():
        gen = model.generate(ids[:1, :4], max_new_tokens=8, do_sample=False)
    check(torch.equal(gen, want_gen), f"keep_small={keep}: generate differs")
    models[keep] = (model, n)

kept, n_kept = models[True]
paged, n_paged = models[False]
norm = kept.model.norm.weight
check("model.norm" not in paged_names(kept), "model.norm is paged by default")
check(id(norm) not in {id(q) for q in wt.paged_parameters(kept)}, "paged_parameters names the kept norm")
check(norm.device.type == torch.device(device).type and norm.untyped_storage().nbytes() ==
      norm.numel() * norm.element_size(), "the kept norm is not a tensor of its own on the device")
check(torch.equal(norm, ref.model.norm.weight), "the kept norm's values differ")
check("model.norm" in paged_names(paged), "keep_small=False did not page model.norm")
check({n for n in paged_names(paged) if n != "model.norm"} == paged_names(kept),
      "keep_small kept more than the norm of this model")
check(n_paged - n_kept == 1, f"a forward acquired {n_kept} layers kept, {n_paged} paged "
      "(one fewer expected)")
for model, _ in models.values():
    wt.remove(model)

trained = wt.from_pretrained(d, device=device, dtype=torch.float32, train=True)
check("model.norm" in paged_names(trained), "train=True kept model.norm out of the pager")
wt.remove(trained)


# The rule, on made-up sizes: layer 0 is the largest (4096 bytes), so a
# small layer is at most 16 bytes and all of them at most 256.
def fake_plan(sizes):
    layers = {i: SimpleNamespace(name=f"l{i}", raw_bytes=s) for i, s in enumerate(sizes)}
    return _plan.Plan(paged={i: [i] for i in layers}, layers=layers)


p = fake_plan([4096, 17, 16, 8, 1000])
check(_plan.keep_small(p, set()) == ["l3", "l2"], "the 1/256 share is not the bound")
check(sorted(p.kept) == [2, 3] and sorted(p.paged) == [0, 1, 4], "kept layers still paged")
p = fake_plan([4096] + [16] * 20)
moved = _plan.keep_small(p, set())
check(len(moved) == 16, f"{len(moved)} small layers kept: the 1/16 total allows 16")
p = fake_plan([4096, 8, 8])
check(_plan.keep_small(p, {"l1"}) == ["l2"], "a layer read on demand was kept")
finish()
