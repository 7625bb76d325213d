"""Peak memory of wspager.torch.from_pretrained with a host cache smaller
than the model: the issue's bound is host cache + 1 GiB, whatever the model
size.  Makes the checkpoint of bench/torch_offload.py if absent, then in a
fresh process loads (meta-device model, pack beside the checkpoint), runs
a forward of 128 tokens and generates 16 tokens, and prints the peak RSS.

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


def child(a):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import wspager
    import wspager.torch as wt
    base = hwm()
    if a.device == "cuda":   # torch's own CUDA context and cuBLAS, before any weight
        x = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
        (x @ x).sum().item()
    torch_cuda = hwm()
    model = wt.from_pretrained(os.path.join(a.dir, "llama"), device=a.device, host_cache=a.host_cache)
    ids = torch.randint(0, model.config.vocab_size, (1, 128), device=a.device)
    with torch.no_grad():
        model(ids)
        model.generate(ids[:, :8], max_new_tokens=16, do_sample=False)
    peak = hwm()
    st = model._wspager.pager.stats()
    cache = wspager.parse_size(a.host_cache)
    weights = model._wspager.pager.pack.summary["raw_bytes"]
    print(f"weights {weights / 2**30:.2f} GiB, host cache {cache / 2**30:.2f} GiB "
          f"(in use {st['host_cache_bytes'] / 2**30:.2f}, staging {st['staging_bytes'] / 2**20:.0f} MiB)")
    print(f"peak RSS {peak / 2**30:.2f} GiB (after importing torch: {base / 2**30:.2f} GiB, after "
          f"torch's CUDA context and cuBLAS: {torch_cuda / 2**30:.2f} GiB); bound host cache + 1 GiB"
          f" = {(cache + 2**30) / 2**30:.2f} GiB: {'within' if peak <= cache + 2**30 else 'ABOVE'}; "
          f"added by wspager above torch's: {(peak - torch_cuda) / 2**30:.2f} GiB")
    sys.exit(0 if peak <= cache + 2**30 else 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp/wsp-torch")
    ap.add_argument("--host-cache", default="2G")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not os.path.exists(os.path.join(a.dir, "llama", "config.json")):
        sys.path.insert(0, HERE)
        import transformers
        from torch_offload import make_checkpoint
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                       num_hidden_layers=16, num_attention_heads=32,
                                       num_key_value_heads=8, max_position_embeddings=4096)
        make_checkpoint(os.path.join(a.dir, "llama"), cfg)
    sys.exit(subprocess.call([sys.executable, __file__, "--child", "--dir", a.dir,
                              "--host-cache", a.host_cache, "--device", a.device]))


if __name__ == "__main__":
    main()
