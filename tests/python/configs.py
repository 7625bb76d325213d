"""The transformers configs the model tests build checkpoints from
(random init, save_pretrained in the test): Llama, GPT-2 (tied
embeddings) and Mixtral, at the sizes a test asks for."""
import transformers


def llama(hidden, layers, vocab, heads=4):
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                                    num_hidden_layers=layers, num_attention_heads=heads,
                                    num_key_value_heads=max(1, heads // 2), max_position_embeddings=256)


def mixtral(hidden, layers, vocab, heads=4, experts=8):
    # transformers' default experts implementation: the paged experts run
    # the model's own, over the routed experts only
    return transformers.MixtralConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     num_key_value_heads=max(1, heads // 2), num_local_experts=experts,
                                     num_experts_per_tok=2, max_position_embeddings=256)


def gpt2(hidden, layers, vocab, heads=4):
    return transformers.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads,
                                   n_positions=256, bos_token_id=vocab - 1, eos_token_id=vocab - 1)
