"""The README's "From PyTorch" example, made runnable: writes a small Llama
checkpoint with transformers (random weights) if DIR does not hold one,
then pages it through wspager on the host backend ("cpu") or a GPU.

    PYTHONPATH=python python3 examples/torch_generate.py [DIR] [cpu|cuda]
"""
import os
import sys

import torch
import transformers

import wspager.torch as wt

d = sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
if not os.path.exists(os.path.join(d, "config.json")):
    # a fixed draw: another can make greedy decoding emit the end-of-text id
    # (2) early and stop short of 16 new tokens
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)

# The five lines of the README:
model = wt.from_pretrained(d, device=device, host_cache="256M")   # packs DIR.wsp once
ids = torch.tensor([[1, 2, 3, 4]], device=device)
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=16, do_sample=False)
print(out.tolist())
print({k: v for k, v in model._wspager.pager.stats().items()
       if k in ("acquires", "gpu_hits", "host_hits", "misses", "bytes_read")})
