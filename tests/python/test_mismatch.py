"""A pack that does not fit the model is refused before anything is bound,
with every difference named: a tensor the model needs that the pack lacks,
a shape that differs, a tensor that matches nothing in the model, a dtype
that differs when training.  The model is left exactly as it was (no hook,
no parameter changed).  A dtype that differs for inference is what
transformers' loader casts: the weight is cast, and the model computes as
transformers' own load of that checkpoint."""
import os
import shutil

import torch
import transformers
from safetensors.torch import load_file, save_file

import wspager
import wspager.torch as wt
from checks import check, finish

T = os.environ["WSP_TEST_TMP"]
cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).eval()
good = os.path.join(T, "good")
model.save_pretrained(good)
sd = load_file(os.path.join(good, "model.safetensors"))


def pack_of(name, edit):
    d = os.path.join(T, name)
    os.makedirs(d)
    tensors = dict(sd)
    edit(tensors)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "generation_config.json"):   # a checkpoint transformers loads
        if os.path.exists(os.path.join(good, f)):
            shutil.copy(os.path.join(good, f), d)
    return wspager.convert(d, d + ".wsp").path


def expect_refused(pack, *needles, **options):
    m = transformers.LlamaForCausalLM(cfg).eval()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    try:
        wt.offload(m, pack, device="cpu", host_cache="16M", **options)
        check(False, f"{pack}: accepted")
        return
    except wt.MismatchError as e:
        msg = str(e)
    print(msg)
    for n in needles:
        check(n in msg, f"{pack}: message lacks {n!r}")
    check(getattr(m, "_wspager", None) is None, f"{pack}: left attached")
    check(all(not mod._forward_pre_hooks for mod in m.modules()), f"{pack}: hooks left")
    after = m.state_dict()
    check(all(torch.equal(before[k], after[k]) for k in before), f"{pack}: parameters changed")


drop = "model.layers.1.mlp.down_proj.weight"
expect_refused(pack_of("missing", lambda t: t.pop(drop)),
               f"model parameter {drop} (float32 [32, 64]) is not in the pack")
shape = "model.layers.0.self_attn.q_proj.weight"
expect_refused(pack_of("shape", lambda t: t.__setitem__(shape, torch.zeros(16, 32))),
               f"tensor {shape}: pack has F32 [16, 32], model has float32 [32, 32]")
dt = "model.norm.weight"
expect_refused(pack_of("dtype", lambda t: t.__setitem__(dt, t[dt].to(torch.bfloat16))),
               f"tensor {dt}: pack has BF16, model has float32; train=True needs the pack's dtype",
               train=True)
expect_refused(pack_of("extra", lambda t: t.__setitem__("vision.proj.weight", torch.zeros(4, 4))),
               "pack tensor vision.proj.weight (F32 [4, 4]) matches no parameter or buffer")
# several problems: all of them in one message
def several(t):
    t.pop(drop)
    t[shape] = torch.zeros(16, 32)
expect_refused(pack_of("several", several), "(2 problems)", drop, shape)
# for inference a dtype that differs is cast, as transformers casts it
ref = transformers.LlamaForCausalLM.from_pretrained(os.path.join(T, "dtype"),
                                                   dtype=torch.float32).eval()
m = transformers.LlamaForCausalLM(cfg).eval()
wt.offload(m, os.path.join(T, "dtype.wsp"), device="cpu", host_cache="16M")
ids = torch.randint(0, 128, (1, 8))
with torch.no_grad():
    check(torch.equal(m(ids).logits, ref(ids).logits), "cast weight: logits differ from transformers'")
check(m.state_dict()[dt].dtype == torch.float32, "state_dict: cast weight not in the model's dtype")
wt.remove(m)
# resident= keeps a parameter the pack lacks
m = transformers.LlamaForCausalLM(cfg).eval()
m.load_state_dict(model.state_dict())
wt.offload(m, os.path.join(T, "missing.wsp"), device="cpu", resident=["model.layers.1.mlp.down_proj"])
ids = torch.randint(0, 128, (1, 8))
with torch.no_grad():
    check(torch.equal(m(ids).logits, model(ids).logits), "resident= parameter: logits differ")
# a pack file that is not a pack
try:
    wt.offload(transformers.LlamaForCausalLM(cfg), os.path.join(T, "good"), device="cpu")
    check(False, "a checkpoint directory accepted as a pack")
except wspager.WspError as e:
    print(e)
    check("manifest.wspm" in str(e), f"not a pack: {e}")
finish()
