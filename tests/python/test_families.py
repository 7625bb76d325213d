"""Any transformers model exactly as transformers runs it: for each family
of tests/python/families.py, in fp32 and bf16, a tiny random checkpoint
(save_pretrained in the test) is loaded once by transformers' own
``Auto*.from_pretrained(dir, dtype=...)`` in its default configuration and
once by ``wspager.torch.from_pretrained(dir, model_class=Auto*)``; then

* every buffer is bit-identical to transformers' (same dtype, same values);
* the forward's logits (last hidden state for encoders) are bit-identical;
* greedy ``generate`` gives the same ids (generative families);
* every tensor the pager binds starts 64-byte aligned, as torch's
  allocator aligns (the CPU kernels choose by alignment);
* mixture-of-experts models read only routed experts (the pager's stats:
  a forward whose tokens are routed to one expert per block reads no other);
* a weight the model reads outside its module's call (ProphetNet) is
  kept on the device after the first forward finds it, and refused with
  train=True, naming the layer.

Also: a checkpoint holding only pytorch_model.bin loads the same; a model
built on the meta device is refused naming its buffers and the fix; the
pack ``wspack convert`` makes without a model (checkpoint grouping) binds
the same way.  argv[1]: "cpu" or "cuda"; argv[2] (optional): families,
comma-separated."""
import os
import shutil
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file

import wspager.torch as wt
from checks import check, finish
from families import FAMILIES, ENCODERS, MISSING, auto_class, inputs

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
only = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else list(FAMILIES)
transformers.logging.set_verbosity_error()
print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")
if MISSING:
    print(f"not in this transformers, not checked: {', '.join(MISSING)}")


def output(o):
    return o.logits if getattr(o, "logits", None) is not None else o.last_hidden_state


def checkpoint(family, dtype, bin_only=False):
    torch.manual_seed(0)
    d = os.path.join(T, f"{family}-{str(dtype)[6:]}{'-bin' if bin_only else ''}")
    auto_class(family).from_config(FAMILIES[family]()).to(dtype).save_pretrained(d)
    if bin_only:   # as older Hub checkpoints are: torch.save of the state dict
        st = os.path.join(d, "model.safetensors")
        torch.save(load_file(st), os.path.join(d, "pytorch_model.bin"))
        os.remove(st)
    return d


def aligned(model) -> list:
    """Names of bound views not 64-byte aligned (looked at inside hooks)."""
    bad = []
    off = model._wspager
    for g in list(off.groups) + list(off.by_index.values()):
        for (ptr, nbytes, _, _), v in g.views.items():
            if nbytes and v.data_ptr() % 64:
                bad.append(f"{g.name or g.index}@{v.data_ptr():#x}")
    return bad


def compare(tag, family, dtype, d, model):
    cls = auto_class(family)
    ref = cls.from_pretrained(d, dtype=dtype).to(device).eval()
    ours = dict(model.named_buffers())
    for name, b in ref.named_buffers():
        o = ours.get(name)
        check(o is not None and o.dtype == b.dtype and o.device.type == device
              and torch.equal(o.cpu(), b.cpu()),
              f"{tag}: buffer {name} differs ({None if o is None else o.dtype} vs {b.dtype})")
    x = inputs(family, device, dtype)
    with torch.no_grad():
        want, got = output(ref(**x)), output(model(**x))
    check(torch.equal(got, want),
          f"{tag}: outputs differ, max {(got.float() - want.float()).abs().max().item():.3g}")
    check(not aligned(model), f"{tag}: views not 64-byte aligned: {aligned(model)[:4]}")
    if family not in ENCODERS:
        gx = {k: v[:1] for k, v in x.items() if k != "decoder_input_ids"}
        kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
        with torch.no_grad():
            check(torch.equal(model.generate(**gx, **kw), ref.generate(**gx, **kw)),
                  f"{tag}: generate differs")


def routed_reads(tag, family, d, model):
    """A 3-token forward of a fresh offload reads only the layers it
    acquires, and leaves some experts unread (whole model fits the cache:
    only routing keeps them out)."""
    wt.remove(model)
    model = wt.from_pretrained(d, device=device, model_class=auto_class(family),
                               host_cache="64M")
    used = set()
    pager = model._wspager.pager
    acquire = pager.acquire
    pager.acquire = lambda i, s=None, **kw: (used.add(i), acquire(i, s, **kw))[1]
    x = {k: (v[:1, :3] if v.dim() == 2 else v[:1]) for k, v in inputs(family, device, torch.float32).items()}
    with torch.no_grad():
        model(**x)
    paths = [x.path for _, x in model._wspager.experts]
    expert_only = {L.index for L in pager.pack.layers
                   if any(L.name.startswith(p + ".") for p in paths)}
    unused = expert_only - used
    read = pager.stats()["bytes_read"]
    bound = sum((L.stored_bytes + 4095) // 4096 * 4096 for L in pager.pack.layers if L.index in used)
    print(f"{tag}: 3 tokens routed to {len(expert_only) - len(unused)} of {len(expert_only)} "
          f"experts; read {read} bytes, the used layers hold at most {bound}")
    check(expert_only and unused, f"{tag}: every expert was routed to; the check proves nothing")
    check(0 < read <= bound, f"{tag}: read {read} bytes, more than the used layers' {bound}")
    return model


for family in only:
    for dtype in (torch.float32, torch.bfloat16):
        tag = f"{family}/{str(dtype)[6:]}"
        d = checkpoint(family, dtype)
        try:
            model = wt.from_pretrained(d, device=device, model_class=auto_class(family),
                                       dtype=dtype, host_cache="64M")
        except Exception as e:
            check(False, f"{tag}: from_pretrained raised {type(e).__name__}: {e}")
            continue
        compare(tag, family, dtype, d, model)
        if model._wspager.experts and dtype == torch.float32:
            model = routed_reads(tag, family, d, model)
        wt.remove(model)
        print(f"{tag}: checked", flush=True)

# pytorch_model.bin only: converted (weights_only loading), same model
if "llama" in only:
    d = checkpoint("llama", torch.float32, bin_only=True)
    check(not any(f.endswith(".safetensors") for f in os.listdir(d)), "the .bin checkpoint has safetensors")
    model = wt.from_pretrained(d, device=device, model_class=auto_class("llama"))
    compare("llama/bin", "llama", torch.float32, d, model)
    wt.remove(model)
    # a .bin that is no state dict, holds code, or is not a torch file:
    # a ValueError naming it, no pack and no temporary left
    for what, write in (("ints", lambda f: torch.save({"w": 1}, f)),
                        ("code", lambda f: torch.save({"w": Exception("x")}, f)),
                        ("garbage", lambda f: open(f, "wb").write(b"not a torch file"))):
        bad = os.path.join(T, f"bad-{what}")
        os.makedirs(bad)
        for name in ("config.json", "generation_config.json"):
            shutil.copy(os.path.join(d, name), bad)
        write(os.path.join(bad, "pytorch_model.bin"))
        try:
            wt.from_pretrained(bad, device=device, model_class=auto_class("llama"))
            check(False, f"bad .bin ({what}) accepted")
        except ValueError as e:
            check("pytorch_model.bin" in str(e), f"bad .bin ({what}): message {e}")
        left = [f for f in os.listdir(T) if f.startswith(f"bad-{what}.")]
        check(not left, f"bad .bin ({what}): left {left}")
    try:
        wt.from_pretrained(d, device=device, model_class=auto_class("llama"), dtype="nope")
        check(False, "dtype='nope' accepted")
    except ValueError as e:
        check("nope" in str(e), f"dtype: {e}")

# A model built on the meta device: refused, naming its buffers and the fix
if "llama" in only:
    d = os.path.join(T, "llama-float32")
    with torch.device("meta"):
        meta = auto_class("llama").from_config(transformers.AutoConfig.from_pretrained(d))
    try:
        wt.offload(meta, d + ".wsp", device=device)
        check(False, "a meta-built model with meta buffers was accepted")
    except wt.MismatchError as e:
        check("rotary_emb.inv_freq" in str(e) and "init_empty" in str(e), f"message: {e}")
    with wt.init_empty():
        empty = auto_class("llama").from_config(transformers.AutoConfig.from_pretrained(d))
    model = wt.offload(empty.eval(), d + ".wsp", device=device)
    compare("llama/init_empty", "llama", torch.float32, d, model)
    wt.remove(model)

# A weight read outside its module's call: with train=True the pager must
# see every use, so the first forward refuses it, naming the layer
if "prophetnet" in only:
    d = os.path.join(T, "prophetnet-float32")
    model = wt.from_pretrained(d, device=device, model_class=auto_class("prophetnet"),
                               host_cache="64M", train=True)
    try:
        model(**inputs("prophetnet", device, torch.float32))
        check(False, "prophetnet, train=True: a weight read outside its module was accepted")
    except RuntimeError as e:
        print(f"prophetnet, train=True: {str(e)[:120]}...")
        check("resident=['prophetnet.decoder." in str(e), f"prophetnet, train=True: {e}")
    wt.remove(model)

# The pack wspack makes alone (no model: checkpoint grouping), renamed keys
if "gpt_neox" in only:
    d = os.path.join(T, "gpt_neox-float32")
    cli = os.path.join(os.environ["top_builddir"], "tools", "wspack")
    cli = cli if os.path.exists(cli) else shutil.which("wspack")
    subprocess.run([cli, "convert", d, "-o", d + ".cli.wsp"], check=True, stdout=subprocess.DEVNULL)
    with wt.init_empty():
        m = auto_class("gpt_neox").from_config(transformers.AutoConfig.from_pretrained(d))
    model = wt.offload(m.eval(), d + ".cli.wsp", device=device)
    compare("gpt_neox/wspack", "gpt_neox", torch.float32, d, model)
    wt.remove(model)
finish()
