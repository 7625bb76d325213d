"""wspager.torch.offload against the resident model, bit for bit: logits of
a forward (max |diff| = 0) and greedy generate() with a KV cache (same
ids), for tiny and mid-size Llama and GPT-2 (tied embeddings) configs in
fp32 and bf16, written by transformers' save_pretrained in the test.
argv[1]: "cpu" (host backend) or "cuda"."""
import os
import sys
import time

import torch
import transformers

import wspager
import wspager.torch as wt
from configs import gpt2, llama, mixtral
from checks import failures, finish

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
    ("mixtral-tiny", mixtral(64, 2, 256)),
    ("mixtral-mid", mixtral(256, 4, 2048, heads=8)),
]

for name, cfg in CASES:
    for dtype in (torch.float32, torch.bfloat16):
        tag = f"{name}/{str(dtype).replace('torch.', '')}"
        torch.manual_seed(0)
        cls = transformers.AutoModelForCausalLM
        ref = cls.from_config(cfg).to(dtype).eval()
        d = os.path.join(T, tag.replace("/", "-"))
        ref.save_pretrained(d)
        pack = d + ".wsp"
        if "mixtral" in name:
            # grouped by the model's modules: a pack layer per routed expert
            wt.convert(cls.from_config(cfg), d, pack)
        else:
            wspager.convert(d, pack)
        ref = ref.to(device)
        ids = torch.randint(0, cfg.vocab_size, (2, 24), device=device)
        with torch.no_grad():
            want = ref(ids).logits
            want_gen = ref.generate(ids[:1], max_new_tokens=32, do_sample=False, min_new_tokens=32)
        # The same model built again, offloaded: its own weights never used.
        model = cls.from_config(cfg).to(dtype).eval()
        wt.offload(model, pack, device=device, host_cache="64M", gpu_slots=3)
        if tag == "llama-mid/bfloat16":
            # Who decodes is measured while running (wsp_open(3)): on CUDA
            # forwards with packed layers, while raw copies are made, and
            # from them; every one gives the same logits, and the pager
            # chooses.  The host backend decodes on the host from the start.
            # (Three slots for eight layers: each forward fills every one,
            # so its bytes over the link say which form crossed.)
            pg = model._wspager.pager
            n, same, carried = 0, True, []
            with torch.no_grad():
                while pg.who_decodes() == "trying" and n < 400 and same:
                    before = pg.stats()["bytes_h2d"]
                    same = torch.equal(model(ids).logits, want)
                    if device == "cuda":
                        torch.cuda.synchronize()   # every fill counted
                    carried.append(pg.stats()["bytes_h2d"] - before)
                    n += 1
            who = pg.who_decodes()
            print(f"{tag:22s} who decodes: {who}, after {n} forwards, each the same; bytes a "
                  f"forward carried: {min(carried, default=0)} to {max(carried, default=0)}")
            if not same:
                failures.append(f"{tag}: logits differ in forward {n} of the decoder's trial")
            if who != ("host" if device == "cpu" else who if who in ("gpu", "host") else "decided"):
                failures.append(f"{tag}: who decodes: {who} after {n} forwards")
            if device == "cuda" and not (carried and max(carried) > 1.3 * min(carried) > 0):
                failures.append(f"{tag}: no forward of the trial carried raw copies: {carried}")
        with torch.no_grad():
            t0 = time.time()
            got = model(ids).logits
            got_gen = model.generate(ids[:1], max_new_tokens=32, do_sample=False, min_new_tokens=32)
            dt = time.time() - t0
        diff = (got.float() - want.float()).abs().max().item()
        same_gen = torch.equal(got_gen, want_gen)
        st = model._wspager.pager.stats()
        print(f"{tag:22s} max|diff| {diff:.3g}  generate 32 tokens same: {same_gen}  "
              f"({dt:.2f} s, {st['acquires']} acquires, {st['misses']} misses)")
        if diff != 0 or not torch.equal(got, want):
            failures.append(f"{tag}: logits differ (max {diff})")
        if not same_gen:
            failures.append(f"{tag}: generate differs: {got_gen.tolist()} vs {want_gen.tolist()}")
        if got_gen.shape[1] != ids.shape[1] + 32:
            failures.append(f"{tag}: generated {got_gen.shape[1] - ids.shape[1]} tokens")
        # Outside a forward the weights are placeholders, not the data.
        p = next(iter(model.model.layers[0].parameters())) if hasattr(model, "model") else \
            next(iter(model.transformer.h[0].parameters()))
        if p.dtype.is_floating_point and not torch.isnan(p).all():
            failures.append(f"{tag}: a paged parameter holds data outside its forward")
        wt.remove(model)
        if "mixtral" in name:
            # Only what runs is read: experts are on demand (the rest is
            # prefetched as usual), so a routed expert is read when a token
            # is routed to it and the others never, although the whole
            # model would fit in the host cache.  This pack is the plain
            # converter's (grouped by checkpoint names, not by the model's).
            model = cls.from_config(cfg).to(dtype).eval()
            wspager.convert(d, d + "-default.wsp")
            wt.offload(model, d + "-default.wsp", device=device, host_cache="64M")
            used = set()
            acquire = model._wspager.pager.acquire
            model._wspager.pager.acquire = lambda i, s=None, **kw: (used.add(i), acquire(i, s, **kw))[1]
            with torch.no_grad():
                got = model(ids[:1, :3]).logits
                want = ref(ids[:1, :3]).logits
            pk = model._wspager.pager.pack
            experts = [L for L in pk.layers if ".experts." in L.name]
            unused = [L for L in experts if L.index not in used]
            read = model._wspager.pager.stats()["bytes_read"]
            bound = sum((L.stored_bytes + 4095) // 4096 * 4096 for L in pk.layers if L.index in used)
            print(f"{tag:22s} 3 tokens routed to {len(experts) - len(unused)} of {len(experts)} "
                  f"experts; read {read} bytes, the used layers hold at most {bound}")
            if not unused:
                failures.append(f"{tag}: every expert was routed to; the check proves nothing")
            if not 0 < read <= bound:
                failures.append(f"{tag}: read {read} bytes, more than the used layers' {bound}")
            if not torch.equal(got, want):
                failures.append(f"{tag}: logits differ without prefetch")
            wt.remove(model)
        del ref

for f in failures:
    print("FAIL:", f)
finish()
