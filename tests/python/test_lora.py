"""LoRA through peft on a paged, frozen base model: ``get_peft_model`` of
an offloaded model trains its adapters exactly as on the resident model.

A 4-layer Llama with 3 GPU slots (a layer held past its use would run out
of slots), LoRA on q_proj and v_proj; a loop as people write it: two
micro-batches per step (accumulation), ``clip_grad_norm_`` active, AdamW
over the trainable parameters, 4 steps over a dataset of 32 rows.  For the
offload made with ``train=False`` and the one made with ``train=True``
(peft freezes the paged weights): the losses, the adapters after every
step and the adapter files of peft's ``save_pretrained`` equal the resident
model's, bit for bit on the CPU (on CUDA the distance is printed and must
be within the CPU-vs-CUDA optimizer difference).  argv[1]: "cpu" or
"cuda"."""
import os

import torch
import transformers
from safetensors.torch import load_file

import wspager.torch as wt
from checks import check, device_arg, finish, require
from configs import llama

peft = require("peft")
T = os.environ["WSP_TEST_TMP"]
device = device_arg()
transformers.logging.set_verbosity_error()
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"peft {peft.__version__}, device {device}")
tol = 0.0 if device == "cpu" else 1e-5
torch.manual_seed(0)
d = os.path.join(T, "llama")
transformers.LlamaForCausalLM(llama(64, 4, 256)).save_pretrained(d)
data = torch.randint(0, 256, (32, 16), generator=torch.Generator().manual_seed(3))
LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def run(base, tag):
    """4 steps of 2 micro-batches with clipping; the losses, the adapters
    after each step, and the directory peft saved them to."""
    torch.manual_seed(1)   # the same adapter initialisation everywhere
    model = peft.get_peft_model(base, peft.LoraConfig(**LORA))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    losses, adapters = [], []
    for step in range(4):
        for micro in range(2):
            rows = data[(step * 2 + micro) * 4:(step * 2 + micro + 1) * 4].to(device)
            loss = model(input_ids=rows, labels=rows).loss / 2
            loss.backward()
            losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(trainable, 0.05)
        opt.step()
        opt.zero_grad()
        adapters.append({n: p.detach().cpu().clone() for n, p in model.named_parameters()
                         if p.requires_grad})
    out = os.path.join(T, f"adapter-{tag}")
    model.save_pretrained(out)
    return model, losses, adapters, out


def distance(a, b):
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))


ref = transformers.AutoModelForCausalLM.from_pretrained(d).to(device)
_, want_losses, want_adapters, want_dir = run(ref, "resident")
want_file = load_file(os.path.join(want_dir, "adapter_model.safetensors"))
check(len(want_adapters[0]) == 2 * 2 * 4, f"{len(want_adapters[0])} adapter tensors")

for train in (False, True):
    tag = f"paged-train={train}"
    base = wt.from_pretrained(d, device=device, host_cache="32M", gpu_slots=3, train=train)
    model, losses, adapters, out = run(base, tag)
    dl = max(abs(a - b) for a, b in zip(losses, want_losses))
    da = max(distance(list(a.values()), list(b.values())) for a, b in zip(adapters, want_adapters))
    print(f"{tag}: 4 steps x 2 micro-batches, clipped: max loss diff {dl:.3g}, "
          f"max adapter diff {da:.3g}")
    check(dl <= tol and da <= tol, f"{tag}: training differs (loss {dl}, adapters {da})")
    changed = sum(not torch.equal(a, b) for a, b in zip(adapters[-1].values(),
                                                         adapters[0].values()))
    check(changed == len(adapters[0]), f"{tag}: only {changed} adapters changed: the check is weak")
    got = load_file(os.path.join(out, "adapter_model.safetensors"))
    check(sorted(got) == sorted(want_file), f"{tag}: saved adapter keys differ")
    check(all((got[k].float() - want_file[k].float()).abs().max().item() <= tol for k in got),
          f"{tag}: saved adapters differ")
    # saving the adapters alone, without reading the paged base
    only = {n: p for n, p in model.named_parameters() if p.requires_grad}
    model.save_pretrained(out + "-only", state_dict=only)
    got = load_file(os.path.join(out + "-only", "adapter_model.safetensors"))
    check(sorted(got) == sorted(want_file) and all(torch.equal(got[k], load_file(
        os.path.join(out, "adapter_model.safetensors"))[k]) for k in got),
        f"{tag}: adapters saved from the trainable parameters differ")
    wt.remove(base)
finish()
