"""wspager.torch.offload(train=True): after one backward, the gradients the
pager accumulated equal the resident model's .grad exactly (max |diff| = 0
in fp32) for tiny and mid-size Llama and GPT-2 (tied embeddings), and
three backward passes accumulate as .grad does; forward logits stay identical.
Each gradient goes as soon as it is made; an embedding that no other
module shares sends only its tokens' rows, or the whole gradient when
the rows would be no smaller.
Then 10 steps of torch's AdamW over wt.parameters(model) against the same
optimizer on the resident model: the same losses at every step, and the
pack wt.save writes unpacks to exactly the resident model's weights; the
paged model keeps only 256 KiB of updated layers in memory, the rest
going through the overflow file (which leaves its directory empty).  The
pager's optimizer steps on fp32 host masters; on CUDA the reference's
optimizer therefore steps on host copies of the resident weights too (the
CPU and CUDA AdamW kernels round differently), and the distance to
training entirely on the GPU is printed, not asserted.  So is the distance
of a third copy trained with the native host AdamW (wt.AdamW): it agrees
with torch's AdamW to ~1e-7 per step on the same gradients
(tests/python/test_adamw.py), and training feeds each step's 1-ulp
differences back through the gradients.
argv[1]: "cpu" (host backend) or "cuda"."""
import os
import sys

import torch
import transformers

import wspager
import wspager.torch as wt
from configs import gpt2, llama
from checks import check, finish

T = os.environ["WSP_TEST_TMP"]
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")


CASES = [
    ("llama-tiny", llama(64, 2, 256)),
    ("llama-mid", llama(256, 6, 2048, heads=8)),
    ("gpt2-tiny", gpt2(64, 2, 256)),
    ("gpt2-mid", gpt2(256, 6, 2048, heads=8)),
]

for name, cfg in CASES:
    tag = f"train-{name}"
    torch.manual_seed(0)
    cls = transformers.AutoModelForCausalLM
    # dropout off (eval), so that both models compute the same function
    ref = cls.from_config(cfg).float().eval()
    d = os.path.join(T, tag)
    ref.save_pretrained(d)
    pack = d + ".wsp"
    wspager.convert(d, pack)
    ref = ref.to(device)
    # Two short batches, whose embedding gradients go as rows, and one of
    # 256 tokens: for llama-tiny's table (256 x 64) rows would be no
    # smaller than the whole gradient, which then goes whole.
    batches = [torch.randint(0, cfg.vocab_size, shape, device=device)
               for shape in ((2, 24), (2, 24), (4, 64))]
    whole = sum(p.numel() * p.element_size() for p in ref.parameters())

    model = cls.from_config(cfg).float().eval()
    events = []   # the pager's timeline: fills in, gradients out
    wt.offload(model, pack, device=device, host_cache="64M", gpu_slots=3, train=True,
               trace=lambda *ev: events.append(ev))
    for step, ids in enumerate(batches):
        out0 = model._wspager.pager.stats()["bytes_d2h"] if step else 0
        want = ref(ids, labels=ids)
        got = model(ids, labels=ids)
        check(torch.equal(want.logits, got.logits), f"{tag} pass {step}: logits differ")
        want.loss.backward()
        got.loss.backward()
        check(torch.equal(want.loss, got.loss), f"{tag} pass {step}: loss differs")
        g = wt.grads(model)
        params = dict(ref.named_parameters())
        worst, missing, differ = 0.0, [], []
        for pname, p in params.items():
            mine = g.get(pname)
            if mine is None:
                missing.append(pname)
                continue
            ref_grad = p.grad.float().cpu()
            if not torch.equal(mine, ref_grad):   # NaN anywhere differs too
                differ.append(pname)
            worst = max(worst, (mine - ref_grad).abs().nan_to_num(float("inf")).max().item())
        check(not missing, f"{tag} pass {step}: no gradient for {missing[:3]}")
        check(not differ, f"{tag} pass {step}: gradients differ for {differ[:3]} "
              f"(max |diff| {worst})")
        print(f"{tag} pass {step}: {len(g)} gradients, max |diff| {worst}")
        out = model._wspager.pager.stats()["bytes_d2h"] - out0
        if name == "llama-tiny" and step == 2:
            check(out == whole, f"{tag} pass {step}: {out} bytes out, want the whole gradients "
                  f"({whole}): 256 tokens' rows are no smaller")
        elif step < 2:
            check(out < whole, f"{tag} pass {step}: {out} bytes out, the whole gradients are "
                  f"{whole}: no rows were sent")
        # nothing stays on the device: each paged parameter's .grad was handed
        # over; what .grad holds after the backward is the pager's host
        # accumulator itself (zero-copy), for clipping and optimizers
        left = [n for n, p in model.named_parameters() if p.grad is not None and not (
            p.grad.device.type == "cpu" and n in g and p.grad.data_ptr() == g[n].data_ptr())]
        check(not left, f"{tag}: .grad left on {left[:3]}, not the pager's accumulators")
    st = model._wspager.pager.stats()
    print(f"{tag}: {st['grad_pushes']} pushes, {st['bytes_d2h']} bytes out")
    check(st["grad_pushes"] > 0, f"{tag}: no gradient pushed")
    # Embeddings no other module shares send the rows of their tokens only
    # (the exact gradients above came that way): not GPT-2's wte, which
    # its tied output head makes dense.
    rows = {n for n, p in model.named_parameters()
            if id(p) in model._wspager.trainer.row_ids}
    want_rows = {"model.embed_tokens.weight"} if name.startswith("llama") else \
        {"transformer.wpe.weight"}
    check(rows == want_rows, f"{tag}: gradients sent as rows for {sorted(rows)}, "
          f"want {sorted(want_rows)}")

    d2h = [e for e in events if e[0] == "d2h"]
    check(len(d2h) == st["grad_pushes"] and sum(e[4] for e in d2h) == st["bytes_d2h"],
          f"{tag}: {len(d2h)} d2h trace events for {st['grad_pushes']} pushes")
    check(all(e[2] <= e[3] for e in events) and any(e[0] == "h2d" for e in events),
          f"{tag}: trace events out of order, or no h2d")
    wt.zero_grad(model)
    check(all(float(t.abs().max()) == 0.0 for t in wt.grads(model).values()),
          f"{tag}: zero_grad left a non-zero accumulator")
    kept = [n for n, p in model.named_parameters() if n in g and p.grad is not None]
    check(not kept, f"{tag}: zero_grad left .grad on {kept[:3]}")
    wt.remove(model)

    # Ten optimizer steps, resident and paged, from the same weights.
    torch.manual_seed(1)
    ref = cls.from_config(cfg).float().eval()
    ref.load_state_dict(cls.from_pretrained(d).state_dict())
    ref = ref.to(device)
    model = cls.from_config(cfg).float().eval()
    # Updated layers beyond 256 KiB go to the overflow file and back.
    ovf = os.path.join(T, tag + "-overflow")
    os.mkdir(ovf)
    wt.offload(model, pack, device=device, host_cache="64M", gpu_slots=3, train=True,
               updated_cache="256K", overflow_dir=ovf)
    ref_params = list(ref.parameters())
    if device == "cuda":
        import copy
        on_gpu = copy.deepcopy(ref)
        opt_gpu = torch.optim.AdamW(on_gpu.parameters(), lr=1e-3)
        host = [torch.nn.Parameter(p.detach().cpu().clone()) for p in ref_params]
        opt_ref = torch.optim.AdamW(host, lr=1e-3)
    else:
        opt_ref = torch.optim.AdamW(ref_params, lr=1e-3)
    opt = torch.optim.AdamW(wt.parameters(model), lr=1e-3)
    native = cls.from_config(cfg).float().eval()
    wt.offload(native, pack, device=device, host_cache="64M", gpu_slots=3, train=True)
    opt_native = wt.AdamW(wt.parameters(native), lr=1e-3)
    check(len(wt.parameters(model)) == len(list(ref.parameters())),
          f"{tag}: {len(wt.parameters(model))} masters for {len(list(ref.parameters()))} parameters")
    same_loss = True
    for step in range(10):
        ids = torch.randint(0, cfg.vocab_size, (2, 24), device=device)
        lr_, lp = ref(ids, labels=ids).loss, model(ids, labels=ids).loss
        same_loss &= torch.equal(lr_, lp)
        lr_.backward()
        lp.backward()
        if device == "cuda":
            for h, p in zip(host, ref_params):
                h.grad = p.grad.detach().cpu()
                p.grad = None
            opt_ref.step()
            with torch.no_grad():
                for h, p in zip(host, ref_params):
                    p.copy_(h)
            on_gpu(ids, labels=ids).loss.backward()
            opt_gpu.step()
            opt_gpu.zero_grad()
        else:
            opt_ref.step()
        opt.step()
        opt_ref.zero_grad()
        if step % 2:   # the pager's zero_grad lets the masters' .grad go too
            wt.zero_grad(model)
            kept = [i for i, m in enumerate(wt.parameters(model)) if m.grad is not None]
            check(not kept, f"{tag}: wt.zero_grad left .grad on masters {kept[:3]}")
        else:
            opt.zero_grad()
        native(ids, labels=ids).loss.backward()
        opt_native.step()
        opt_native.zero_grad()
    check(same_loss, f"{tag}: losses differ during training")
    st = model._wspager.pager.stats()
    print(f"{tag}: updated layers {st['updated_bytes']} bytes, {st['updated_resident']} in "
          f"memory; overflow file: {st['overflow_written']} bytes written, "
          f"{st['overflow_read']} read")
    check(st["overflow_written"] > 0 and st["overflow_read"] > 0,
          f"{tag}: the overflow file was not used")
    check(st["updated_resident"] < st["updated_bytes"], f"{tag}: every updated layer in memory")
    check(not os.listdir(ovf), f"{tag}: the overflow directory holds {os.listdir(ovf)}")
    out = os.path.join(T, tag + "-tuned.wsp")
    wt.save(model, out)
    unpacked = out + ".st"
    wspager.Pack(out).unpack(unpacked)
    from safetensors.torch import load_file
    got = {}
    for f in sorted(os.listdir(unpacked)):
        if f.endswith(".safetensors"):
            got.update(load_file(os.path.join(unpacked, f)))
    want_sd = {k: v.detach().cpu() for k, v in ref.state_dict().items()}
    differ = [k for k, v in got.items() if k in want_sd and not torch.equal(v, want_sd[k])]
    check(got and not differ, f"{tag}: after 10 steps the saved pack differs for {differ[:3]}")
    moved = [k for k, v in got.items() if k in want_sd and
             not torch.equal(v, load_file(os.path.join(d, "model.safetensors"))[k])]
    check(moved, f"{tag}: the saved weights did not change")
    print(f"{tag}: 10 AdamW steps, same losses {same_loss}; saved pack: {len(got)} tensors, "
          f"{len(differ)} differ from resident training, {len(moved)} changed by it")
    if device == "cuda":
        rel = max(((got[k] - v.detach().cpu()).abs().max() /
                   v.detach().cpu().abs().max().clamp_min(1e-30)).item()
                  for k, v in on_gpu.state_dict().items() if k in got)
        print(f"{tag}: against training entirely on the GPU (CUDA AdamW): max relative "
              f"difference {rel:.3g} (not asserted)")
    wt.remove(model)
    out_n = os.path.join(T, tag + "-native.wsp")
    wt.save(native, out_n)
    wspager.Pack(out_n).unpack(out_n + ".st")
    got_n = {}
    for f in sorted(os.listdir(out_n + ".st")):
        if f.endswith(".safetensors"):
            got_n.update(load_file(os.path.join(out_n + ".st", f)))
    rel = max(((got_n[k] - want_sd[k]).abs().max() / want_sd[k].abs().max().clamp_min(1e-30)).item()
              for k in got_n if k in want_sd)
    print(f"{tag}: native AdamW after 10 training steps: max relative difference {rel:.3g} "
          f"from the reference (not asserted)")
    wt.remove(native)

finish()
