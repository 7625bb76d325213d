"""Fine-tune a model larger than the GPU with LoRA, without quantization:
the base model's weights stay frozen and paged through wspager (read from
the pack as each layer runs, forward and backward), and only the adapters
peft adds live on the device and train.  Writes a small Llama checkpoint
with transformers (random weights) if DIR does not hold one.

    PYTHONPATH=python python3 examples/torch_lora.py [DIR] [cpu|cuda] [OUT]

OUT (default DIR-lora) receives the adapters, as peft saves them; load
them later with ``peft.PeftModel.from_pretrained(base, OUT)``.
"""
import os
import sys

import peft
import torch
import transformers

import wspager.torch as wt

d = sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
out = sys.argv[3] if len(sys.argv) > 3 else d.rstrip("/") + "-lora"
if not os.path.exists(os.path.join(d, "config.json")):
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)

base = wt.from_pretrained(d, device=device, host_cache="256M")   # paged, frozen
model = peft.get_peft_model(base, peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                  target_modules=["q_proj", "v_proj"]))
model.print_trainable_parameters()
trainable = [p for p in model.parameters() if p.requires_grad]   # the adapters
opt = torch.optim.AdamW(trainable, lr=1e-3)
data = torch.randint(0, model.config.vocab_size, (16, 32), generator=torch.Generator().manual_seed(0))
model.train()
for step in range(4):
    batch = data[step * 4:(step + 1) * 4].to(device)
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    opt.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")
# The adapters alone: handing peft the trainable parameters keeps it from
# reading the whole paged base through state_dict().
model.save_pretrained(out, state_dict={n: p for n, p in model.named_parameters() if p.requires_grad})
print(f"adapters saved to {out}")
