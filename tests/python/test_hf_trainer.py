"""transformers' Trainer over an offloaded model, as people fine-tune:

* LoRA (peft) over a paged frozen base: ``Trainer(model=get_peft_model(
  offloaded, ...), args=TrainingArguments(...), train_dataset=...)`` with
  accumulation and clipping gives the losses and adapters of the same
  Trainer on the resident model, bit for bit on the CPU (distance printed
  and bounded on CUDA);
* full fine-tuning of the paged weights through the Trainer (its
  optimizer and clipping over ``model.parameters()``, the paged ones
  stepped as their fp32 host masters): losses, gradient norms, weights
  after the steps and ``save_pretrained`` equal the resident Trainer's;
* the same with Accelerate's own loop (``prepare``, ``accumulate``,
  ``clip_grad_norm_``).
argv[1]: "cpu" or "cuda"."""
import os

import torch
import transformers

import wspager.torch as wt
from checks import check, device_arg, finish, require
from configs import llama

peft = require("peft")
T = os.environ["WSP_TEST_TMP"]
device = device_arg()
transformers.logging.set_verbosity_error()
tol = 0.0 if device == "cpu" else 1e-5
torch.manual_seed(0)
d = os.path.join(T, "llama")
transformers.LlamaForCausalLM(llama(64, 4, 256)).save_pretrained(d)
first = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).state_dict()
rows = torch.randint(0, 256, (32, 16), generator=torch.Generator().manual_seed(3))


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return len(rows)

    def __getitem__(self, i):
        return {"input_ids": rows[i], "labels": rows[i]}


def trainer(model, tag):
    args = transformers.TrainingArguments(
        output_dir=os.path.join(T, tag), per_device_train_batch_size=4,
        gradient_accumulation_steps=2, max_grad_norm=0.05, learning_rate=1e-2, max_steps=4,
        use_cpu=device == "cpu", report_to=[], logging_steps=1, save_strategy="no", seed=5,
        dataloader_num_workers=0)
    return transformers.Trainer(model=model, args=args, train_dataset=Rows())


def lora(base, tag):
    torch.manual_seed(1)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                      target_modules=["q_proj", "v_proj"]))
    tr = trainer(model, tag)
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    return losses, {n: p.detach().cpu().clone() for n, p in model.named_parameters()
                    if p.requires_grad}


want_losses, want = lora(transformers.AutoModelForCausalLM.from_pretrained(d), "resident")
base = wt.from_pretrained(d, device=device, host_cache="32M", gpu_slots=3)
losses, got = lora(base, "paged")
dl = max(abs(a - b) for a, b in zip(losses, want_losses))
da = max((got[k] - want[k]).abs().max().item() for k in want)
print(f"LoRA through the Trainer, 4 steps: losses {losses}; max loss diff {dl:.3g}, "
      f"max adapter diff {da:.3g}")
check(len(losses) == 4 and sorted(got) == sorted(want), f"{len(losses)} losses, {len(got)} adapters")
check(dl <= tol and da <= tol, f"LoRA through the Trainer differs (loss {dl}, adapters {da})")
check(any(not torch.equal(got[k], torch.zeros_like(got[k])) for k in got if "lora_B" in k),
      "lora_B still zero: nothing trained")
wt.remove(base)


def full(model, tag):
    tr = trainer(model, tag)
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    norms = [h["grad_norm"] for h in tr.state.log_history if "grad_norm" in h]
    return losses, norms, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


# Full fine-tuning: the Trainer's optimizer and clipping take
# model.parameters(); the paged ones step as their fp32 host masters.
resident = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
want_losses, want_norms, want = full(resident, "full-resident")
model = wt.from_pretrained(d, device=device, host_cache="32M", train=True)
losses, norms, got = full(model, "full-paged")
dl = max(abs(a - b) for a, b in zip(losses, want_losses))
dn = max(abs(a - b) for a, b in zip(norms, want_norms))
dw = max((got[k].float() - want[k].float()).abs().max().item() for k in want)
moved = max((want[k].float() - first[k].float()).abs().max().item() for k in want)
print(f"full fine-tuning through the Trainer, 4 steps: losses {losses}; grad norms {norms}; "
      f"max loss diff {dl:.3g}, max grad-norm diff {dn:.3g}, max weight diff {dw:.3g} "
      f"(the weights moved by up to {moved:.3g})")
check(len(losses) == 4 and len(norms) == 4 and sorted(got) == sorted(want),
      f"{len(losses)} losses, {len(norms)} norms, {len(got)} tensors")
check(min(want_norms) > 0.05, f"the clip is not active (grad norms {want_norms})")
check(dl <= tol and dn <= tol * max(want_norms) and dw <= tol,
      f"full fine-tuning through the Trainer differs (loss {dl}, grad norm {dn}, weights {dw})")
check(moved > 0, "the resident Trainer changed no weight")
check(model.device.type == device and model.dtype == torch.float32,
      f"after training the model says it is on {model.device} in {model.dtype}")
saved = os.path.join(T, "full-saved")
model.save_pretrained(saved)
back = transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).state_dict()
ds = max((back[k] - want[k]).abs().max().item() for k in want)
check(ds <= tol, f"save_pretrained after the Trainer differs from its weights by {ds}")
wt.remove(model)


def accelerated(model):
    """The loop Accelerate's docs write: prepare, accumulate, clip, step."""
    import accelerate
    acc = accelerate.Accelerator(cpu=device == "cpu", gradient_accumulation_steps=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = acc.prepare(model, opt)
    model.train()
    losses = []
    for i in range(8):
        ids = rows[4 * i:4 * i + 4].to(acc.device)
        with acc.accumulate(model):
            loss = model(input_ids=ids, labels=ids).loss
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), 0.05)
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


want_losses, want = accelerated(
    transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32))
model = wt.from_pretrained(d, device=device, host_cache="32M", train=True)
losses, got = accelerated(model)
dl = max(abs(a - b) for a, b in zip(losses, want_losses))
dw = max((got[k].float() - want[k].float()).abs().max().item() for k in want)
print(f"Accelerate loop, 8 micro-batches: max loss diff {dl:.3g}, max weight diff {dw:.3g}")
check(dl <= tol and dw <= tol, f"the Accelerate loop differs (loss {dl}, weights {dw})")
wt.remove(model)
finish()
