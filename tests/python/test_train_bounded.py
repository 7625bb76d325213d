"""Training inside a memory bound: a Llama whose fp32 weights and AdamW
state (12 bytes a parameter) are together several times the pager's host
budgets trains through wspager.torch (from_pretrained: the weights never
loaded whole; step_in_backward: masters and moments kept by the pager,
wsp_state_acquire), with the updated layers and the state past their
budgets in the overflow files.  The process's peak RSS over the training
(on CUDA from the second step: the first loads the kernels' modules;
glibc told to give freed blocks back rather than keep them) grows by less
than half the weights and state (what keeping them in memory would take), the overflow files were used, and the pack wt.save
writes unpacks to exactly the weights of the same model trained resident
with the same optimizer (in another process, so as not to count it).
argv[1]: "cpu" (host backend) or "cuda"; the two halves run as
subprocesses of this script (argv[1] "resident" / "paged")."""
import json
import os
import subprocess
import sys

import torch
import transformers

from configs import llama

T = os.environ["WSP_TEST_TMP"]
STEPS = 3
CFG = llama(768, 24, 8192)


def batches(device):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, CFG.vocab_size, (2, 16), generator=g).to(device) for _ in range(STEPS)]


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def resident(d, device, out):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(device)
    model.eval()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for ids in batches(device):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    from safetensors.torch import save_file
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, out)


def paged(d, device, out, report):
    import wspager.torch as wt
    ovf = os.path.join(T, "overflow")
    os.makedirs(ovf, exist_ok=True)
    model = wt.from_pretrained(d, device=device, host_cache="160M", gpu_slots=3, train=True,
                               updated_cache="24M", state_cache="24M", overflow_dir=ovf)
    model.eval()
    opt = wt.step_in_backward(model, torch.optim.AdamW, lr=1e-3)
    reset, base = False, 0
    for k, ids in enumerate(batches(device)):
        # The peak from here on (the first step on CUDA loads the kernels'
        # modules into host memory: CUDA's, not the pager's), reset where
        # the kernel lets us (clear_refs 5).
        if k == (1 if device == "cuda" else 0):
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
                reset = True
            except OSError:
                pass
            base = rss_kib("VmRSS")
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    wt.save(model, out)
    st = model._wspager.pager.stats()
    json.dump({"base_kib": base, "peak_kib": rss_kib("VmHWM"), "peak_reset": reset,
               "stats": {k: st[k] for k in ("state_held", "state_resident", "updated_bytes",
                                            "updated_resident", "overflow_written",
                                            "overflow_read")},
               "left": sorted(os.listdir(ovf))}, open(report, "w"))


def main():
    device = sys.argv[1]
    if device in ("resident", "paged"):
        mode, device, d, out = sys.argv[1:5]
        resident(d, device, out) if mode == "resident" else paged(d, device, out, sys.argv[5])
        return
    if device == "cuda" and not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        sys.exit(77)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")
    from checks import check, finish
    from safetensors.torch import load_file
    import wspager
    torch.manual_seed(0)
    d = os.path.join(T, "bounded")
    transformers.AutoModelForCausalLM.from_config(CFG).float().save_pretrained(d)
    n = sum(t.numel() for t in load_file(os.path.join(d, "model.safetensors")).values())
    weights, state = 4 * n, 12 * n
    me = os.path.abspath(__file__)
    ref, out, report = (os.path.join(T, x) for x in ("ref.safetensors", "tuned.wsp", "report.json"))
    subprocess.run([sys.executable, me, "resident", device, d, ref], check=True)
    # glibc's malloc keeps blocks torch frees in its heaps, up to a threshold
    # it raises as it goes (hundreds of MiB here, varying from run to run):
    # the paged half runs with blocks of 128 KiB and more mapped on their
    # own, so that its peak is the memory it uses.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    subprocess.run([sys.executable, me, "paged", device, d, out, report], check=True, env=env)
    r = json.load(open(report))
    grew = (r["peak_kib"] - r["base_kib"]) << 10
    st = r["stats"]
    print(f"{n / 1e6:.1f} M parameters: fp32 weights {weights >> 20} MiB + AdamW state "
          f"{state >> 20} MiB; budgets: host cache 160 MiB, updated layers 24 MiB, state 24 MiB")
    first = 2 if device == "cuda" else 1
    print(f"peak RSS over steps {first}-{STEPS} grew {grew >> 20} MiB (peak "
          f"{'reset' if r['peak_reset'] else 'of the process'}); "
          f"state kept {st['state_held'] >> 20} MiB, {st['state_resident'] >> 20} MiB in memory; "
          f"overflow files: {st['overflow_written'] >> 20} MiB written, "
          f"{st['overflow_read'] >> 20} MiB read")
    check(st["state_held"] >= state * 9 // 10, f"the pager kept {st['state_held']} bytes of "
          f"state, the optimizer has {state}")
    check(st["state_resident"] <= 24 << 20, f"{st['state_resident']} bytes of state in memory, "
          "above the 24 MiB budget")
    check(st["overflow_written"] > 0 and st["overflow_read"] > 0, "the overflow files were not used")
    check(not r["left"], f"files left in the overflow directory: {r['left']}")
    check(grew < (weights + state) // 2, f"peak RSS grew {grew >> 20} MiB, not below half the "
          f"{(weights + state) >> 20} MiB of weights and state")
    got = {}
    st_dir = out + ".st"
    wspager.Pack(out).unpack(st_dir)
    for f in sorted(os.listdir(st_dir)):
        if f.endswith(".safetensors"):
            got.update(load_file(os.path.join(st_dir, f)))
    want = load_file(ref)
    differ = [k for k in want if k in got and not torch.equal(got[k], want[k])]
    missing = [k for k in want if k not in got and "lm_head" not in k]
    check(not differ and not missing, f"after {STEPS} steps the saved pack differs from "
          f"resident training for {differ[:3]}, lacks {missing[:3]}")
    print(f"saved pack: {len(got)} tensors, {len(differ)} differ from resident training")
    finish()


if __name__ == "__main__":
    main()
