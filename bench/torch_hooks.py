"""The host's cost of one paged layer visit in wspager.torch: what its
hooks, bindings and library calls add to each layer a forward or a
backward uses, measured where compute is nearly free (a narrow Llama) so
that the host's time is what shows.

One run, one checkpoint (a transformers Llama from a config, random
weights, save_pretrained), the same model resident and paged
(wt.from_pretrained, by default with a slot for every layer, so that no
visit fills one: what is measured is the caller's own path).  Rows: a
forward without gradients (a decode step's shape: `--tokens` tokens),
and a LoRA step (peft, r=16 on q, k, v,
o: forward, backward, AdamW over the adapters).  Each: median ms resident,
median ms paged, and (paged - resident) / layer visits, a visit being one
acquire (the pager's counter).  The ceiling is the resident model in the
same run; for the LoRA row also the resident step under saved-tensor
hooks that do nothing (what autograd's hook mechanism, which the paged
backward needs, costs by itself).  With --parts, after the rows, a model
per row again with timers around wspager.torch's hooks, the library's
acquire and release, and the current-stream queries: time a visit in
each.  With --cprofile, a few more paged steps of each row run under
cProfile and the wspager functions are printed by time.

  python3 bench/torch_hooks.py --device cuda [--layers 8 --hidden 256 --reps 50]
"""
import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wspager.torch as wt  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device, reps: int, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def forward_row(model, ids):
    def run():
        with torch.no_grad():
            model(input_ids=ids)
    return run


def lora_row(model, ids):
    import peft
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def run():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return run


def lora_hooked_row(model, ids):
    """The resident LoRA step under saved-tensor hooks that do nothing: what
    autograd's hook mechanism alone costs (wspager.torch's backward of
    paged weights needs those hooks)."""
    step = lora_row(model, ids)

    def run():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            step()
    return run


def profile(fn, steps: int, top: int) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        fn()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats("wspager", top)
    return out.getvalue()


class Parts:
    """With --parts: wall time inside wspager.torch's entry points (the
    module hooks, the saved-tensor hooks) and, within them, inside the
    library's acquire and release calls and the current-stream queries,
    by wrapping each (the wrappers add a little of their own)."""

    def __init__(self):
        import wspager._lib as c
        from wspager import _bind, _offload, _saved
        self.t = {}
        self.n = {}
        self.depth = 0
        for cls, name in ((_bind.PagedModuleHook, "pre_forward"),
                          (_bind.PagedModuleHook, "post_forward"),
                          (_saved.SavedWeights, "_pack"), (_saved.SavedWeights, "_unpack"),
                          (_saved.SavedWeights, "_dropped")):
            setattr(cls, name, self._timed(getattr(cls, name), "hooks", outer=True))
        _offload.Offload._stream = self._timed(_offload.Offload._stream, "stream queries")
        lib = c.lib()
        for fn in ("wsp_acquire", "wsp_release_view"):
            setattr(lib, fn, self._timed(getattr(lib, fn), "library acquire/release"))

    def _timed(self, f, key, outer=False):
        def run(*args, **kwargs):
            if outer:
                self.depth += 1
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                if outer:
                    self.depth -= 1
                if not outer or self.depth == 0:
                    self.t[key] = self.t.get(key, 0.0) + time.perf_counter() - t0
                    self.n[key] = self.n.get(key, 0) + 1
        return run

    def report(self, visits: float) -> str:
        return ", ".join(f"{k} {v / visits * 1e6:.0f} us" for k, v in self.t.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dir", help="checkpoint folder (default: a temporary one)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--gpu-slots", type=int, default=0,
                    help="the pager's slots (default: every layer, so no visit fills one)")
    ap.add_argument("--rows", default="forward,lora")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    ap.add_argument("--parts", action="store_true",
                    help="also time the hooks, library calls and stream queries a visit")
    ap.add_argument("--cprofile", type=int, default=0, metavar="STEPS",
                    help="then STEPS paged steps of each row under cProfile")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    tmp = None
    d = a.dir
    if d is None:
        tmp = tempfile.TemporaryDirectory(prefix="wsp-hooks-")
        d = tmp.name
    if not os.path.exists(os.path.join(d, "config.json")):
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(
            hidden_size=a.hidden, intermediate_size=a.hidden * 11 // 4,
            num_hidden_layers=a.layers, num_attention_heads=max(1, a.hidden // 64),
            num_key_value_heads=max(1, a.hidden // 256), vocab_size=2048)
        transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(d)
    ids = torch.randint(0, 2048, (1, a.tokens), device=dev)
    rows = {"forward": forward_row, "lora": lora_row}
    print(f"{a.layers} layers, hidden {a.hidden}, {a.tokens} tokens, device {dev}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    for row in a.rows.split(","):
        make = rows[row]
        ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).to(dev)
        t_res = median_ms(make(ref, ids), dev, a.reps)
        if row == "lora":
            del ref
            ref = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).to(dev)
            t_hooked = median_ms(lora_hooked_row(ref, ids), dev, a.reps)
            print(f"lora, resident under saved-tensor hooks that do nothing: {t_hooked:.2f} ms "
                  f"({t_hooked - t_res:+.2f} ms against resident: autograd's hooks alone)")
        del ref
        model = wt.from_pretrained(d, device=dev, gpu_slots=a.gpu_slots or a.layers + 3)
        pg = model._wspager.pager
        fn = make(model, ids)
        fn()
        pg.reset_stats()
        t_pag = median_ms(fn, dev, a.reps, warm=2)
        st = pg.stats()
        visits = st["acquires"] / (a.reps + 2)
        print(f"{row}: resident {t_res:.2f} ms, paged {t_pag:.2f} ms, {visits:.0f} layer visits "
              f"a step ({st['gpu_hits'] / (a.reps + 2):.0f} from slots): "
              f"{(t_pag - t_res) / visits * 1e3:.0f} us a visit beyond the resident step "
              f"(paged / resident {t_pag / t_res:.2f}x)")
        if a.cprofile:
            print(profile(fn, a.cprofile, 30))
        wt.remove(model)
        del model, fn
    if a.parts:   # after the rows: the wrappers stay once put on
        parts = Parts()
        for row in a.rows.split(","):
            model = wt.from_pretrained(d, device=dev, gpu_slots=a.gpu_slots or a.layers + 3)
            pg = model._wspager.pager
            fn = rows[row](model, ids)
            fn()
            parts.t.clear()
            pg.reset_stats()
            t_parts = median_ms(fn, dev, a.reps, warm=0)
            print(f"{row}, timed inside, a visit ({t_parts:.2f} ms a step with the timers): "
                  + parts.report(pg.stats()["acquires"]))
            wt.remove(model)
            del model, fn
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
