"""Sweep every causal-LM family the installed transformers has (or every
encoder-decoder, or masked-LM family: --kind) through
wspager.torch.from_pretrained, against transformers' own load.

For each model type in transformers' auto mapping of that kind: its config
class's defaults with the sizes shrunk (hidden size, layers, heads,
experts, vocabulary: whichever attributes the config has, in it and in its
text sub-config), a random model saved with save_pretrained, then loaded
twice - by the Auto class's from_pretrained and by
wspager.torch.from_pretrained - and the logits of one forward (the last
hidden state where there are none) and greedy generate() (causal and
encoder-decoder) compared.  A family whose shrunk config transformers itself
cannot build or run is reported as such, not as a wspager result.  Not a
test (it takes minutes and depends on transformers' defaults); the tests'
own families are in tests/python/families.py.

  python3 scripts/family_sweep.py [--kind causal|seq2seq|masked] [--device cpu|cuda]
                                  [--dtype float32|bfloat16] [--only a,b] [--from NAME]
                                  [--dir DIR]

Prints one line a family (identical / DIFFERENT / wspager error /
transformers refused) and a summary; exit status 1 when a family differs
or wspager fails where transformers ran."""
import argparse
import os
import shutil
import sys
import tempfile
import traceback
from typing import Tuple

import torch
import transformers
from transformers.models.auto import modeling_auto

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wspager.torch as wt  # noqa: E402

# Small values for the size attributes configs commonly have.
SMALL = {
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "embed_dim": 64,
    "intermediate_size": 128, "ffn_dim": 128, "n_inner": 128, "d_ff": 128,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "n_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
    "max_position_embeddings": 128, "n_positions": 128,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64,
    "expert_intermediate_size": 64, "num_experts": 4, "num_local_experts": 4,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_num_experts": 4,
    "n_shared_experts": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 16, "n_group": 1, "topk_group": 1,
    "sliding_window": 32, "attention_window_size": 32, "rotary_dim": 8,
    "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16,
    "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_ssm": 128, "mamba_d_state": 16,
    "state_size": 16,
    "time_step_rank": 8, "index_head_dim": 16, "index_n_heads": 4,
    "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "embedding_size": 64,
}

# Where a family's config ties sizes together that the shrink above
# breaks: what makes them agree again.
AGREE = {
    "mamba2": {"head_dim": 32, "n_groups": 1},   # heads x head_dim = expand x hidden
    # default hybrids of state-space layers only, which transformers'
    # generate cannot run: one attention layer
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "deepseek_v2": {"num_experts_per_tok": 2},     # None by default
    "gemma3n_text": {"num_kv_shared_layers": 0},   # 10 of 2 layers
    "jamba": {"attn_layer_offset": 1, "attn_layer_period": 2,
              "expert_layer_offset": 1, "expert_layer_period": 2},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},   # None by default
    "esm": {"vocab_size": 256, "pad_token_id": 1, "mask_token_id": 2},   # None by default
}


TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
          "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id")
LIMIT = 20_000_000    # parameters after shrinking; larger ones are left out


def value(cfg, name: str):
    """cfg.name, or None where the config has none or will not give one
    (a per-layer attribute asked of the whole model)."""
    try:
        return getattr(cfg, name, None)
    except Exception:
        return None


def is_size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def mla_agree(over: dict, cfg) -> None:
    """Multi-head latent attention (DeepSeek and its kin): head_dim is the
    rotary part of a query's head, and every head has its keys."""
    rope = over.get("qk_rope_head_dim", value(cfg, "qk_rope_head_dim"))
    if not is_size(rope):
        return
    if is_size(value(cfg, "head_dim")):
        over["head_dim"] = rope
    if is_size(value(cfg, "num_key_value_heads")):
        over["num_key_value_heads"] = SMALL["num_attention_heads"]


def layer_kinds(kinds: list, n: int) -> Tuple[list, int]:
    """A list of layer kinds for n layers (at least one layer a kind, in
    the order they first come), and the layers that takes."""
    distinct = list(dict.fromkeys(kinds))
    n = max(n, len(distinct))
    return (distinct * n)[:n], n


def small_config(cls):
    """The config class's defaults with the sizes shrunk, given at
    construction where the class validates its fields together (layer
    kinds a layer each)."""
    base = cls()
    agree = AGREE.get(cls.model_type, {})
    over = {k: v for k, v in SMALL.items() if is_size(value(base, k))}
    over.update(agree)
    mla_agree(over, base)
    n = over.get("num_hidden_layers")
    for name, kinds in vars(base).items():
        if n and isinstance(kinds, list) and kinds and name.endswith(("_types", "_type")) \
                and name not in agree:
            over[name], n = layer_kinds(kinds, n)
            over["num_hidden_layers"] = n
    for name, kinds in vars(base).items():
        if n and isinstance(kinds, list) and name.endswith(("_indices", "_ids")) and \
                all(isinstance(i, int) for i in kinds):
            over[name] = [i for i in kinds if i < n] or [n - 1]
    try:
        cfg = cls(**over)
    except Exception:
        cfg = base
    shrink(cfg)
    return cfg


def shrink(cfg) -> None:
    agree = dict(AGREE.get(cfg.model_type, {}))
    mla_agree(agree, cfg)
    for name, v in {**SMALL, **agree}.items():
        if is_size(value(cfg, name)) or name in agree:
            try:
                setattr(cfg, name, v)
            except Exception:   # a derived, read-only attribute
                pass
    for k, name in enumerate(TOKENS):     # token ids inside the small vocabulary
        t = value(cfg, name)
        if is_size(t) and t >= SMALL["vocab_size"]:
            try:
                setattr(cfg, name, k % 3)
            except Exception:
                pass
    for inner in list(vars(cfg).values()):   # sub-configs (text, vision, encoder...)
        if isinstance(inner, transformers.PretrainedConfig):
            shrink(inner)
    for name in ("layer_types", "layers_block_type", "block_types"):
        kinds = value(cfg, name)
        n = value(cfg, "num_hidden_layers")
        if isinstance(kinds, list) and kinds and n and len(kinds) != n:
            kinds, n = layer_kinds(kinds, n)
            cfg.num_hidden_layers = n
            setattr(cfg, name, kinds)


# --kind: the auto mapping swept, the Auto class that loads it, and whether
# the forward takes decoder inputs and generate() runs
KINDS = {
    "causal": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", False, True),
    "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM", True,
                True),
    "masked": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", False, False),
}


def output(o) -> torch.Tensor:
    return o.logits if getattr(o, "logits", None) is not None else o.last_hidden_state


def one(family: str, root: str, device: torch.device, dtype: torch.dtype,
        kind: str = "causal") -> str:
    _, auto_name, seq2seq, generates = KINDS[kind]
    auto = getattr(transformers, auto_name)
    cls = transformers.CONFIG_MAPPING[family]
    d = os.path.join(root, family)
    try:
        torch.manual_seed(0)
        cfg = small_config(cls)
        with torch.device("meta"):
            size = sum(p.numel() for p in auto.from_config(cfg).parameters())
        if size > LIMIT:
            return f"left out: {size / 1e6:.0f} M parameters after shrinking"
        model = auto.from_config(cfg)
        model.to(dtype).save_pretrained(d)
        del model
        ref = auto.from_pretrained(d, dtype=dtype).to(device)
        ref.eval()
        vocab = getattr(ref.config.get_text_config(), "vocab_size", 256) or 256
        ids = torch.randint(3, min(vocab, 256), (2, 10),
                            generator=torch.Generator().manual_seed(1)).to(device)
        x = {"input_ids": ids}
        if seq2seq:
            x["decoder_input_ids"] = ids[:, :6]
        with torch.no_grad():
            want = output(ref(**x))
            want_gen = None
            if generates:
                try:
                    want_gen = ref.generate(ids[:1, :4], max_new_tokens=5, do_sample=False)
                except Exception:
                    pass
    except Exception as e:
        return f"transformers refused: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    try:
        model = wt.from_pretrained(d, device=device, host_cache="256M", dtype=dtype,
                                   model_class=auto)
        model.eval()
        with torch.no_grad():
            got = output(model(**x))
            gen = None
            if want_gen is not None:
                gen = model.generate(ids[:1, :4], max_new_tokens=5, do_sample=False)
        wt.remove(model)
    except Exception as e:
        traceback.print_exc()
        return f"wspager error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(d + ".wsp", ignore_errors=True)
    diff = (got.float() - want.float()).abs().max().item()
    same_gen = want_gen is None or torch.equal(gen, want_gen)
    if diff == 0 and same_gen:
        return "identical" + ("" if want_gen is not None else " (no generate)")
    # transformers' CPU load leaves weights it does not cast as views of the
    # mapped file, at its offsets; some CPU kernels choose by alignment.
    # The same model with its weights in memory of their own:
    odd = sum(1 for p in ref.parameters() if p.data_ptr() % 64)
    with torch.no_grad():
        for p in ref.parameters():
            p.data = p.data.clone()
        if odd and torch.equal(output(ref(**x)), got):
            return (f"identical to transformers' model with its weights in memory of their "
                    f"own ({odd} of its own load's were not 64-byte aligned)")
    return f"DIFFERENT: max |logits diff| {diff}, generate equal {same_gen}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--only", default="", help="comma-separated model types")
    ap.add_argument("--from", dest="start", default="", help="start at this model type")
    ap.add_argument("--dir", help="scratch folder (default: a temporary one)")
    ap.add_argument("--kind", default="causal", choices=sorted(KINDS),
                    help="which auto mapping: causal LMs, encoder-decoders, masked LMs")
    a = ap.parse_args()
    transformers.logging.set_verbosity_error()
    families = sorted(getattr(modeling_auto, KINDS[a.kind][0]))
    if a.only:
        families = [f for f in families if f in a.only.split(",")]
    if a.start:
        families = [f for f in families if f >= a.start]
    root = a.dir or tempfile.mkdtemp(prefix="wsp-sweep-")
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {device}, "
          f"{a.dtype}, {a.kind}: {len(families)} families", flush=True)
    tally = {}
    for f in families:
        r = one(f, root, device, dtype, a.kind)
        tally.setdefault(r.split(":")[0].split(" (")[0], []).append(f)
        print(f"{f}: {r}", flush=True)
    print()
    for k, fs in sorted(tally.items()):
        print(f"{k}: {len(fs)}" + (f" ({', '.join(fs)})" if k != "identical" else ""))
    bad = [k for k in tally if k.startswith("DIFFERENT") or k.startswith("wspager")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
