"""Named model shapes built from config with random weights: speed does not depend on the weights' values, and
no model hub is needed. Sizes follow the published configs of each model."""

from __future__ import annotations

import torch

# name -> transformers config kwargs (model_type first). Vocabulary sizes are the real ones: the output head
# is a large share of the compute of these small models.
SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                       max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True),
    # Qwen2.5-7B: untied head (vocabulary padded to 152,064), 4 KV heads.
    "qwen2.5-7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       max_position_embeddings=131072, rope_theta=1000000.0, tie_word_embeddings=False),
    "gemma3-270m": dict(model_type="gemma3_text", hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                        num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                        sliding_window=512, query_pre_attn_scalar=256, max_position_embeddings=32768,
                        tie_word_embeddings=True),
    "gemma3-1b": dict(model_type="gemma3_text", hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                      sliding_window=512, query_pre_attn_scalar=256, max_position_embeddings=32768,
                      tie_word_embeddings=True),
    # For tests and CPU smoke runs: seconds to build and to step.
    "tiny": dict(model_type="qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=2048, max_position_embeddings=4096,
                 tie_word_embeddings=True),
}


def build_shape(name: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                attn_implementation: str = "sdpa", seed: int = 0):
    """A causal LM of the named shape with random weights, created directly on `device` in `dtype`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if name not in SHAPES:
        raise KeyError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}")
    spec = dict(SHAPES[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    return model
