"""An offloaded model's weights seen from outside its forward: state_dict()
equals the resident model's (transformers' own from_pretrained), key for
key and bit for bit, tied weights one tensor; save_pretrained writes a
checkpoint transformers loads back to the same logits (no NaN); after a
training step both give the trained weights; .half()/.to(dtype) raise
before anything moves; a forward after remove raises.
argv[1]: "cpu" (host backend) or "cuda"."""
import glob
import os
import sys

import torch
import transformers
from safetensors.torch import load_file

import wspager.torch as wt
from checks import check, finish
from configs import gpt2, llama, mixtral

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
Auto = transformers.AutoModelForCausalLM
ids = torch.randint(0, 200, (2, 12), device=device)


def raises(fn, exc=RuntimeError, text=""):
    try:
        fn()
    except exc as e:
        return text in str(e)
    return False


for name, cfg in (("llama", llama(64, 2, 256)), ("gpt2", gpt2(64, 2, 256)),
                  ("mixtral", mixtral(64, 2, 256))):
    for dtype in (torch.float32, torch.bfloat16):
        tag = f"{name}/{str(dtype).replace('torch.', '')}"
        torch.manual_seed(0)
        d = os.path.join(T, tag.replace("/", "-"))
        Auto.from_config(cfg).to(dtype).save_pretrained(d)
        ref = Auto.from_pretrained(d, dtype=dtype).to(device).eval()
        model = wt.from_pretrained(d, device=device, host_cache="16M")
        with torch.no_grad():
            want = ref(ids).logits
            before = model(ids).logits   # (MoE: its experts compute as 'eager' does)

        sd, rsd = model.state_dict(), ref.state_dict()
        check(sorted(sd) == sorted(rsd), f"{tag}: keys differ: {sorted(set(sd) ^ set(rsd))}")
        bad = [k for k in rsd if k in sd and not torch.equal(sd[k].cpu(), rsd[k].cpu())]
        check(not bad, f"{tag}: state_dict values differ from the resident model's: {bad[:5]}")
        nan = [k for k, v in sd.items() if v.is_floating_point() and v.isnan().any()]
        check(not nan, f"{tag}: NaN in state_dict: {nan[:5]}")
        if name == "gpt2":   # tied: one tensor, as in the resident model's state dict
            check(sd["lm_head.weight"] is sd["transformer.wte.weight"],
                  f"{tag}: tied weights are two tensors")

        out = os.path.join(T, tag.replace("/", "-") + "-saved")
        model.save_pretrained(out)
        saved = {}
        for f in glob.glob(os.path.join(out, "*.safetensors")):
            saved.update(load_file(f))
        check(saved and not any(v.is_floating_point() and v.isnan().any() for v in saved.values()),
              f"{tag}: save_pretrained wrote NaN or nothing")
        back = Auto.from_pretrained(out, dtype=dtype).to(device).eval()
        with torch.no_grad():
            got_back = back(ids).logits
        check(torch.equal(got_back, want), f"{tag}: the saved checkpoint's logits differ by "
              f"{(got_back.float() - want.float()).abs().max().item()}")

        # conversions that would leave the paged weights behind raise, and move nothing
        other = torch.float16 if dtype != torch.float16 else torch.float32
        check(raises(model.half, text="paged by wspager"), f"{tag}: .half() did not raise")
        check(raises(lambda: model.to(other)), f"{tag}: .to({other}) did not raise")
        check(raises(lambda: model.model.to(other) if hasattr(model, "model")
                     else model.transformer.to(other)), f"{tag}: submodule .to() did not raise")
        if device == "cpu":
            check(raises(lambda: model.to("meta")), f"{tag}: .to('meta') did not raise")
        model.to(device)         # changes nothing: allowed
        with torch.no_grad():
            got = model(ids).logits
        check(torch.equal(got, before), f"{tag}: logits moved after refused conversions by "
              f"{(got.float() - before.float()).abs().max().item()}")
        # the weights' own dtype: allowed, and buffers follow as in a resident model
        model.to(dtype)
        ref.to(dtype)
        # (not Mixtral: its paged experts compute as 'eager' does, the
        # resident model's with transformers' default experts implementation)
        if name != "mixtral":
            with torch.no_grad():
                check(torch.equal(model(ids).logits, ref(ids).logits),
                      f"{tag}: .to({dtype}) differs from the resident model's")

        wt.remove(model)
        check(raises(lambda: model(ids), text="remove"), f"{tag}: a forward after remove ran")
        print(f"{tag}: state_dict, save_pretrained, conversions and remove checked")

# After a training step: the trained weights, as the next forward uses them.
torch.manual_seed(0)
d = os.path.join(T, "train")
Auto.from_config(llama(64, 2, 256)).save_pretrained(d)
model = wt.from_pretrained(d, device=device, host_cache="16M", train=True)
before = {k: v.clone() for k, v in model.state_dict().items()}
opt = torch.optim.AdamW(wt.parameters(model), lr=1e-2)
model.train()
model(ids, labels=ids).loss.backward()
opt.step()
opt.zero_grad()
model.eval()
with torch.no_grad():
    want = model(ids).logits
sd = model.state_dict()
changed = [k for k in sd if not torch.equal(sd[k], before[k])]
check(len(changed) >= 10, f"training: only {len(changed)} state_dict entries changed")
out = os.path.join(T, "trained")
model.save_pretrained(out)
back = Auto.from_pretrained(out, dtype=torch.float32).to(device).eval()
with torch.no_grad():
    got = back(ids).logits
check(torch.equal(got, want), f"training: the saved trained checkpoint's logits differ by "
      f"{(got - want).abs().max().item()}")
print(f"training: {len(changed)} of {len(sd)} entries changed, saved checkpoint equal")
wt.remove(model)
# A model that converts one of its own modules while its forward runs
# (SwitchTransformers' router casts its classifier to fp32 at every
# forward): in bf16 it gets what it asked for, and equals transformers'
# own load; the same conversion from outside a forward still raises.
cfg = transformers.SwitchTransformersConfig(
    vocab_size=256, d_model=64, d_kv=16, d_ff=128, expert_capacity=8, num_layers=2,
    num_decoder_layers=2, num_heads=4, num_experts=4, num_sparse_encoder_layers=1,
    num_sparse_decoder_layers=1, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
d = os.path.join(T, "switch")
torch.manual_seed(0)
S2S = transformers.AutoModelForSeq2SeqLM
S2S.from_config(cfg).to(torch.bfloat16).save_pretrained(d)
ref = S2S.from_pretrained(d, dtype=torch.bfloat16).to(device).eval()
x = {"input_ids": ids[:, :10] % 256, "decoder_input_ids": ids[:, :6] % 256}
model = wt.from_pretrained(d, device=device, model_class=S2S, dtype=torch.bfloat16,
                           host_cache="64M").eval()
try:
    with torch.no_grad():
        diff = (model(**x).logits.float() - ref(**x).logits.float()).abs().max().item()
    print(f"switch_transformers/bfloat16 (router cast to fp32 in its forward): max |diff| {diff}")
    check(diff == 0, f"switch_transformers/bfloat16: logits differ by {diff}")
except RuntimeError as e:
    check(False, f"switch_transformers/bfloat16: the router's own conversion raised: {e}")
router = next(m for n, m in model.named_modules() if n.endswith("router.classifier"))
check(raises(lambda: router.to(torch.float16), text="paged by wspager"),
      "switch_transformers: a conversion from outside a forward did not raise")
wt.remove(model)
finish()
