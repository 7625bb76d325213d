"""A model offloaded over several devices (wspager.torch.offload /
from_pretrained with device=[...] or an Accelerate-style device_map):
consecutive blocks go to each device, balanced by bytes; each device's
pager reads and caches only its own layers; activations move between
devices.  Checked, on a Llama and on a Mixtral (routed experts): logits
and greedy generate() bit-identical to the resident model; every pack
layer read by exactly one pager (the bytes read add up to at most the
pack's stored size, each pager read some, neither more than 3/4); a
device_map places layers where it says; the outputs come back to the
inputs' device; LoRA (peft) over it trains as over the resident model
(losses and adapters, bit for bit on the CPU); device="auto" takes every
GPU; moving the whole model to
one device is refused (on two GPUs); a GPU named twice, no device, a meta
device, a map that leaves a layer out, train=True over several
devices and a "disk" device_map refused with the reason.
argv[1]: "cpu" (two host pagers: the placement without GPUs) or "cuda"
(two GPUs: skip, 77, with fewer)."""
import os
import sys

import torch
import transformers

import wspager
import wspager.torch as wt
from checks import check, finish
from configs import llama, mixtral

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and torch.cuda.device_count() < 2:
    print("SKIP: fewer than two CUDA devices")
    sys.exit(77)
devices = ["cpu", "cpu"] if device == "cpu" else ["cuda:0", "cuda:1"]
first = torch.device(devices[0])
transformers.logging.set_verbosity_error()
torch.manual_seed(0)


def stored_bytes(pack):
    with wspager.Pack(pack) as p:
        return p.summary["stored_bytes"]


def run(name, config, cls):
    d = os.path.join(T, name)
    cls(config).save_pretrained(d)
    ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(first)
    ids = torch.randint(0, config.vocab_size, (2, 12), device=first)
    with torch.no_grad():
        want = ref(ids).logits
        want_gen = ref.generate(ids[:1, :5], max_new_tokens=8, do_sample=False)
    model = wt.from_pretrained(d, device=devices, host_cache="64M", dtype=torch.float32)
    off = model._wspager
    check(len(off.pagers) == 2, f"{name}: {len(off.pagers)} pagers for two devices")
    placed = {}
    for g in sorted(off.groups, key=lambda g: g.index):
        pager, dev = off.where(g.index)
        placed.setdefault((off.pagers.index(pager), str(dev)), []).append(g.name)
    print(f"{name}: " + "; ".join(f"pager {k} on {dev}: {len(v)} layers ({v[0]} .. {v[-1]})"
                                  for (k, dev), v in placed.items()))
    check(len(placed) == 2, f"{name}: layers placed on {len(placed)} pagers")
    with torch.no_grad():
        got = model(ids).logits
        gen = model.generate(ids[:1, :5], max_new_tokens=8, do_sample=False)
    check(got.device == first, f"{name}: logits on {got.device}, the inputs on {first}")
    diff = (got.float().cpu() - want.float().cpu()).abs().max().item()
    print(f"{name}: logits over two devices: max |diff| {diff}; generate equal: "
          f"{torch.equal(gen.cpu(), want_gen.cpu())}")
    check(diff == 0, f"{name}: logits over two devices differ by {diff}")
    check(torch.equal(gen.cpu(), want_gen.cpu()), f"{name}: generate differs: {gen} vs {want_gen}")
    reads = [pg.stats()["bytes_read"] for pg in off.pagers]
    total = stored_bytes(d + ".wsp")
    print(f"{name}: bytes read by each pager {reads}, the pack stores {total}")
    check(all(r > 0 for r in reads), f"{name}: a pager read nothing: {reads}")
    check(sum(reads) <= total, f"{name}: {sum(reads)} bytes read, the pack stores {total}: "
          "a layer was read by both pagers")
    check(max(reads) <= 0.75 * total, f"{name}: one pager read {max(reads)} of {total} bytes")
    wt.remove(model)
    return d


d = run("llama", llama(64, 4, 256), transformers.LlamaForCausalLM)
run("mixtral", mixtral(64, 2, 256), transformers.MixtralForCausalLM)

# an Accelerate-style device_map: the embedding and the first two blocks on
# the first device, the rest on the second
if device == "cuda":
    dmap = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0,
            "model.layers.2": 1, "model.layers.3": 1, "model.norm": 1, "model.rotary_emb": 0,
            "lm_head": 1}
    model = wt.from_pretrained(d, device=dmap, host_cache="64M", dtype=torch.float32)
    off = model._wspager
    where = {g.name: str(off.where(g.index)[1]) for g in off.groups}
    want = {"model.embed_tokens": "cuda:0", "model.layers.1": "cuda:0",
            "model.layers.2": "cuda:1", "lm_head": "cuda:1"}
    check(all(where.get(k) == v for k, v in want.items()), f"device_map placed {where}")
    ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(first)
    ids = torch.randint(0, 256, (2, 12), device=first)
    with torch.no_grad():
        diff = (model(ids).logits - ref(ids).logits).abs().max().item()
    print(f"device_map: {where}; logits max |diff| {diff}")
    check(diff == 0, f"device_map: logits differ by {diff}")
    # moving the whole model to one device would move its resident tensors
    # but not the pagers' layers: refused
    try:
        model.to(first)
        check(False, "model.to(one device) of a model over two was accepted")
    except RuntimeError as e:
        print(f"model.to({first}) over two devices: {str(e)[:90]}...")
    wt.remove(model)

# LoRA over the model on two devices (the base frozen, adapters on each
# block's device): three AdamW steps give the resident model's losses and
# adapters (bit for bit on the CPU; two GPUs' kernels within rounding)
peft = None
try:
    import peft
except ImportError:
    print("LoRA over two devices: peft is not installed, not checked")


def lora_steps(base):
    torch.manual_seed(1)
    m = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                  target_modules=["q_proj", "v_proj"]))
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(5)).to(first)
    losses = []
    for _ in range(3):
        loss = m(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, torch.cat([p.detach().float().cpu().flatten() for p in params])


if peft is not None:
    want_losses, want_adapters = lora_steps(
        transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(first))
    model = wt.from_pretrained(d, device=devices, host_cache="64M", dtype=torch.float32)
    losses, adapters = lora_steps(model)
    diff = (adapters - want_adapters).abs().max().item()
    print(f"LoRA over two devices: losses {losses} (resident {want_losses}); adapters max "
          f"|diff| {diff}")
    tol = 0 if device == "cpu" else 1e-5
    check(all(abs(a - b) <= tol * abs(b) for a, b in zip(losses, want_losses)) and diff <= tol,
          f"LoRA over two devices: losses {losses} vs {want_losses}, adapters differ by {diff}")
    wt.remove(model)

# "auto": every GPU torch sees (the host backend without one)
model = wt.from_pretrained(d, device="auto", host_cache="64M", dtype=torch.float32)
want_pagers = torch.cuda.device_count() if torch.cuda.device_count() > 1 else 1
check(len(model._wspager.pagers) == want_pagers,
      f'device="auto": {len(model._wspager.pagers)} pagers, {want_pagers} wanted')
wt.remove(model)

try:
    wt.from_pretrained(d, device=devices, host_cache="64M", train=True)
    check(False, "train=True over two devices was accepted")
except NotImplementedError as e:
    print(f"train over two devices: {e}")
# device arguments that cannot be right: refused before anything is opened
bad = [(["cuda:0", "cuda:0"], "twice"), ([], "empty"), ({}, "empty"), (["cpu", "meta"], "meta")]
if device == "cuda":   # a map that places only some layers
    bad.append(({"model.embed_tokens": 0, "model.layers": 1}, "places no module"))
for arg, word in bad:
    try:
        wt.from_pretrained(d, device=arg, host_cache="64M")
        check(False, f"device={arg!r} was accepted")
    except ValueError as e:
        print(f"device={arg!r}: {e}")
        check(word in str(e), f"device={arg!r}: the message does not say {word!r}: {e}")
try:
    wt.from_pretrained(d, device={"model": "disk"}, host_cache="64M")
    check(False, "a 'disk' device_map was accepted")
except ValueError as e:
    print(f"disk device_map: {e}")
    check("disk" in str(e), f"message: {e}")
finish()
