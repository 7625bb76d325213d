"""Peak memory of wspager.torch.from_pretrained with a host cache smaller
than the model: the target is host cache + 1 GiB, whatever the model size.
Makes the checkpoint of bench/torch_offload.py if absent and its pack (in a
process of its own), then in a fresh process loads (meta-device model, pack
beside the checkpoint), runs a forward of 128 tokens and generates 16
tokens, and prints the peak RSS after each phase, with the largest mappings.
On CUDA it first runs a one-layer model of the same config resident: what
torch itself keeps in host memory to run the model (CUDA context, kernel
modules), which no pager can avoid, so that what the pager adds is apart.

  python3 bench/torch_rss.py --dir /var/tmp/wsp-torch --host-cache 2G [--device cuda]
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def hwm() -> int:
    """Peak resident bytes of this process image (VmHWM: unlike ru_maxrss,
    not inherited across exec from the parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def largest_mappings(n: int = 8):
    """The n mappings holding the most resident memory: (KiB, description)."""
    out, head = [], ""
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                head = line.strip()
            elif first == "Rss:":
                out.append((int(line.split()[1]), head))
    out.sort(reverse=True)
    return out[:n]


def torch_alone(a, transformers):
    """What torch itself keeps in host memory to run this architecture: a
    one-layer model of the same config, its weights made on the device,
    running the same forward and generate.  CUDA loads each kernel's module
    on first use and keeps it in host memory; that is torch's, not the
    pager's, and no host cache budget can include it."""
    import torch
    import wspager.torch as wt
    cfg = transformers.AutoConfig.from_pretrained(os.path.join(a.dir, "llama"))
    cfg.num_hidden_layers = 1
    with wt.init_empty():   # parameters on meta, buffers (rotary) real
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for m in model.modules():
            for name, p in [(n, p) for n, p in m._parameters.items() if p is not None]:
                m._parameters[name] = torch.nn.Parameter(
                    torch.empty(p.shape, dtype=torch.bfloat16, device=a.device).normal_(0, 0.02),
                    requires_grad=False)
        model.to(a.device)
        ids = torch.randint(0, cfg.vocab_size, (1, 128), device=a.device)
        model(ids)
        model.generate(ids[:, :8], max_new_tokens=16, do_sample=False)
    del model
    return hwm()


def child(a):
    phases = []

    def mark(what):
        phases.append((what, hwm()))
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import wspager
    import wspager.torch as wt
    mark("import torch, wspager")
    base = hwm()
    if a.device == "cuda":   # torch's own CUDA context and cuBLAS, before any weight
        x = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
        (x @ x).sum().item()
    mark("torch's CUDA context and cuBLAS")
    torch_cuda = hwm()
    import transformers  # noqa: F401  (from_pretrained imports it; counted apart)
    mark("import transformers")
    if a.device == "cuda":   # on the CPU its weights would be counted too
        torch_alone(a, transformers)
        mark("torch runs it resident (1 layer)")
    torch_run = hwm()
    model = wt.from_pretrained(os.path.join(a.dir, "llama"), device=a.device, host_cache=a.host_cache)
    mark("from_pretrained (meta model, pager open)")
    ids = torch.randint(0, model.config.vocab_size, (1, 128), device=a.device)
    with torch.no_grad():
        model(ids)
        mark("forward of 128 tokens")
        model.generate(ids[:, :8], max_new_tokens=16, do_sample=False)
        mark("generate 16 tokens")
    peak = hwm()
    prev = 0
    for what, v in phases:
        print(f"  peak after {what:42s} {v / 2**30:6.2f} GiB (+{(v - prev) / 2**20:7.0f} MiB)")
        prev = v
    print("  largest mappings now (resident):")
    for kib, head in largest_mappings():
        print(f"    {kib / 2**20:6.2f} GiB  {head[:110]}")
    st = model._wspager.pager.stats()
    cache = wspager.parse_size(a.host_cache)
    weights = model._wspager.pager.pack.summary["raw_bytes"]
    print(f"weights {weights / 2**30:.2f} GiB, host cache {cache / 2**30:.2f} GiB "
          f"(in use {st['host_cache_bytes'] / 2**30:.2f}, staging {st['staging_bytes'] / 2**20:.0f} MiB)")
    print(f"peak RSS {peak / 2**30:.2f} GiB (after importing torch: {base / 2**30:.2f} GiB, after "
          f"torch's CUDA context and cuBLAS: {torch_cuda / 2**30:.2f} GiB, and running the model "
          f"resident: {torch_run / 2**30:.2f} GiB); bound host cache + 1 GiB"
          f" = {(cache + 2**30) / 2**30:.2f} GiB: {'within' if peak <= cache + 2**30 else 'ABOVE'}; "
          f"added above torch's own: {(peak - torch_run) / 2**30:.2f} GiB"
          f" = host cache {'+' if peak - torch_run >= cache else '-'} "
          f"{abs(peak - torch_run - cache) / 2**20:.0f} MiB")
    # The pager's own share: all it adds above what torch takes to run the
    # same model resident.  Exit status 1 when that is above host cache + 1 GiB.
    sys.exit(0 if peak - torch_run <= cache + 2**30 else 1)


def convert_child(a):
    """Convert the checkpoint to its pack (DIR.wsp, as from_pretrained
    caches it), in a process of its own so its peak is reported apart."""
    import transformers
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import wspager.torch as wt
    d = os.path.join(a.dir, "llama")
    with wt.init_empty():
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(d))
    wt.convert(model, d, d + ".wsp", force=os.path.exists(d + ".wsp"))
    print(f"  convert: peak RSS {hwm() / 2**30:.2f} GiB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/wsp-torch")
    ap.add_argument("--host-cache", default="2G")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--convert-child", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.convert_child:
        return convert_child(a)
    if not os.path.exists(os.path.join(a.dir, "llama", "config.json")):
        sys.path.insert(0, HERE)
        import transformers
        from torch_offload import make_checkpoint
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                       num_hidden_layers=16, num_attention_heads=32,
                                       num_key_value_heads=8, max_position_embeddings=4096)
        make_checkpoint(os.path.join(a.dir, "llama"), cfg)
    if not os.path.exists(os.path.join(a.dir, "llama.wsp", "manifest.wspm")):
        subprocess.check_call([sys.executable, __file__, "--convert-child", "--dir", a.dir])
    sys.exit(subprocess.call([sys.executable, __file__, "--child", "--dir", a.dir,
                              "--host-cache", a.host_cache, "--device", a.device]))


if __name__ == "__main__":
    main()
