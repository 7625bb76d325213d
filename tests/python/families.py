"""Tiny configs of the transformers families wspager.torch is checked
against (tests/python/test_families.py): each family's config class, the
Auto class transformers loads it with, and the inputs of a forward.
Sizes are the smallest each family accepts: a test checks our rules, not
the model."""
import torch
import transformers as tf

H, L, V, HEADS = 32, 2, 128, 4


def _decoder(cls, **kw):
    base = dict(vocab_size=V, hidden_size=H, intermediate_size=2 * H, num_hidden_layers=L,
                num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=64)
    base.update(kw)
    return cls(**base)


def _moe(cls, **kw):
    return _decoder(cls, **kw)


FAMILIES = {
    "llama": lambda: _decoder(tf.LlamaConfig),
    "mistral": lambda: _decoder(tf.MistralConfig),
    "qwen2": lambda: _decoder(tf.Qwen2Config),
    "qwen3": lambda: _decoder(tf.Qwen3Config, head_dim=8),
    "phi3": lambda: _decoder(tf.Phi3Config, pad_token_id=0),
    "gemma": lambda: _decoder(tf.GemmaConfig, head_dim=8),
    "gemma2": lambda: _decoder(tf.Gemma2Config, head_dim=8, sliding_window=16),
    "gpt2": lambda: tf.GPT2Config(vocab_size=V, n_embd=H, n_layer=L, n_head=HEADS, n_positions=64),
    "gpt_neox": lambda: tf.GPTNeoXConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                         num_attention_heads=HEADS, intermediate_size=2 * H,
                                         max_position_embeddings=64),
    "gptj": lambda: tf.GPTJConfig(vocab_size=V, n_embd=H, n_layer=L, n_head=HEADS, n_positions=64,
                                  rotary_dim=4),
    "opt": lambda: tf.OPTConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, ffn_dim=2 * H,
                                num_attention_heads=HEADS, max_position_embeddings=64,
                                word_embed_proj_dim=H),
    "falcon": lambda: tf.FalconConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                      num_attention_heads=HEADS),
    "bloom": lambda: tf.BloomConfig(vocab_size=V, hidden_size=H, n_layer=L, n_head=HEADS),
    "mixtral": lambda: _moe(tf.MixtralConfig, num_local_experts=8, num_experts_per_tok=2),
    "qwen2_moe": lambda: _moe(tf.Qwen2MoeConfig, num_experts=8, num_experts_per_tok=2,
                              moe_intermediate_size=H, shared_expert_intermediate_size=H),
    "qwen3_moe": lambda: _moe(tf.Qwen3MoeConfig, num_experts=8, num_experts_per_tok=2,
                              moe_intermediate_size=H, head_dim=8),
    "deepseek_v2": lambda: _moe(tf.DeepseekV2Config, n_routed_experts=8, num_experts_per_tok=2,
                                moe_intermediate_size=H, n_shared_experts=1, first_k_dense_replace=1,
                                kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16,
                                qk_nope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1),
    "deepseek_v3": lambda: _moe(tf.DeepseekV3Config, n_routed_experts=8, num_experts_per_tok=2,
                                moe_intermediate_size=H, n_shared_experts=1, first_k_dense_replace=1,
                                kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=16,
                                qk_nope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1),
    "olmoe": lambda: _moe(tf.OlmoeConfig, num_experts=8, num_experts_per_tok=2),
    "t5": lambda: tf.T5Config(vocab_size=V, d_model=H, d_kv=8, d_ff=2 * H, num_layers=L,
                              num_heads=HEADS, decoder_start_token_id=0),
    "bart": lambda: tf.BartConfig(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L,
                                  encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                                  encoder_ffn_dim=2 * H, decoder_ffn_dim=2 * H,
                                  max_position_embeddings=64),
    # sinusoidal position tables that are parameters but not in the
    # checkpoint (transformers makes them; kept resident)
    "marian": lambda: tf.MarianConfig(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L,
                                      encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                                      encoder_ffn_dim=2 * H, decoder_ffn_dim=2 * H,
                                      max_position_embeddings=64, pad_token_id=0, eos_token_id=2,
                                      decoder_start_token_id=0, forced_eos_token_id=2),
    "whisper": lambda: tf.WhisperConfig(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L,
                                        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                                        encoder_ffn_dim=2 * H, decoder_ffn_dim=2 * H, num_mel_bins=8,
                                        max_source_positions=16, max_target_positions=64,
                                        decoder_start_token_id=1, pad_token_id=0, eos_token_id=2,
                                        bos_token_id=1, suppress_tokens=None, begin_suppress_tokens=None),
    "bert": lambda: tf.BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                  num_attention_heads=HEADS, intermediate_size=2 * H,
                                  max_position_embeddings=64),
    # its attention multiplies a weight by a batch of inputs (torch.matmul
    # picks its algorithm by the weight's requires_grad)
    "longformer": lambda: tf.LongformerConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                              num_attention_heads=HEADS, intermediate_size=2 * H,
                                              max_position_embeddings=64, attention_window=8,
                                              pad_token_id=0),
    # its decoder reads two embeddings' weights without calling their
    # modules (kept on the device after the first forward sees it)
    "prophetnet": lambda: tf.ProphetNetConfig(vocab_size=V, hidden_size=H, num_encoder_layers=L,
                                              num_decoder_layers=L, num_encoder_attention_heads=HEADS,
                                              num_decoder_attention_heads=HEADS,
                                              encoder_ffn_dim=2 * H, decoder_ffn_dim=2 * H,
                                              max_position_embeddings=64, ngram=2,
                                              num_buckets=8, relative_max_distance=16,
                                              pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                              decoder_start_token_id=1),
    "vit": lambda: tf.ViTConfig(hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                                intermediate_size=2 * H, image_size=16, patch_size=4),
}

# Families whose layers differ from the above in kind: a sliding-window
# text Gemma, experts with attention sinks, a state-space model, short
# convolutions beside attention, linear attention beside experts.  Only
# where the installed transformers has them (a release may predate one).
NEWER = {
    "gemma3_text": ("Gemma3TextConfig", lambda c: _decoder(c, head_dim=8, sliding_window=16)),
    "gpt_oss": ("GptOssConfig", lambda c: _moe(c, head_dim=8, num_local_experts=8,
                                               num_experts_per_tok=2, sliding_window=16)),
    "mamba": ("MambaConfig", lambda c: c(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                         state_size=8, expand=2, time_step_rank=4, conv_kernel=4)),
    "lfm2": ("Lfm2Config", lambda c: _decoder(c, layer_types=["conv", "full_attention"])),
    "minimax": ("MiniMaxConfig", lambda c: _moe(c, head_dim=8, num_local_experts=8,
                                                num_experts_per_tok=2)),
    # hybrids: Mamba blocks with attention and experts; gated delta rule
    # with attention and experts; Mamba2 blocks sharing one attention block
    # (the same weights used at several depths)
    "jamba": ("JambaConfig", lambda c: _moe(c, num_hidden_layers=4, num_experts=4,
                                            num_experts_per_tok=2, expert_layer_period=2,
                                            expert_layer_offset=1, attn_layer_period=2,
                                            attn_layer_offset=1, mamba_d_state=8,
                                            mamba_dt_rank=8)),
    "qwen3_next": ("Qwen3NextConfig", lambda c: _moe(
        c, num_hidden_layers=4, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=H, shared_expert_intermediate_size=H, full_attention_interval=2)),
    "zamba2": ("Zamba2Config", lambda c: _decoder(
        c, num_hidden_layers=4, num_key_value_heads=HEADS, attention_head_dim=16,
        mamba_d_state=8, mamba_headdim=8, n_mamba_heads=8, chunk_size=16,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], hybrid_layer_ids=[1, 3],
        num_mem_blocks=1, use_mem_rope=False, adapter_rank=8)),
    # checkpoints whose one tensor transformers' loader splits into several
    # parameters (a fused query_key_value; a fused linear-attention input
    # projection)
    "sarvam_moe": ("SarvamMoEConfig", lambda c: _moe(c, head_dim=8, n_routed_experts=8,
                                                     num_experts_per_tok=2,
                                                     moe_intermediate_size=H)),
    "lara_mini": ("LaraMiniConfig", lambda c: _moe(
        c, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=H,
        shared_expert_intermediate_size=H, layer_types=["linear_attention", "sliding_attention"],
        sliding_window=16, eos_token_id=2)),
}
for _family, (_cls, _make) in NEWER.items():
    if hasattr(tf, _cls):
        FAMILIES[_family] = lambda c=getattr(tf, _cls), m=_make: m(c)
MISSING = sorted(f for f, (c, _) in NEWER.items() if not hasattr(tf, c))

SEQ2SEQ = {"t5", "bart", "marian", "whisper"}
ENCODERS = {"bert", "longformer", "vit"}


def auto_class(family):
    if family in ENCODERS:
        return tf.AutoModel
    if family == "whisper":
        return tf.AutoModelForSpeechSeq2Seq
    if family in SEQ2SEQ:
        return tf.AutoModelForSeq2SeqLM
    return tf.AutoModelForCausalLM


def inputs(family, device, dtype):
    g = torch.Generator().manual_seed(1)
    if family == "vit":
        return {"pixel_values": torch.randn(2, 3, 16, 16, generator=g).to(device, dtype)}
    if family == "whisper":
        return {"input_features": torch.randn(2, 8, 32, generator=g).to(device, dtype),
                "decoder_input_ids": torch.randint(3, V, (2, 6), generator=g).to(device)}
    ids = torch.randint(3, V, (2, 12), generator=g).to(device)
    if family in SEQ2SEQ:
        return {"input_ids": ids, "decoder_input_ids": ids[:, :6]}
    return {"input_ids": ids}
