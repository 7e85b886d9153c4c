"""Named model shapes built from config with random weights: speed does not depend on the weights' values, and
no model hub is needed. Sizes follow the published configs of each model (for the mixtures of experts: each model's
config.json on the hub, the keys transformers 5 reads; gpt-oss in its bf16 form, without the mxfp4 quantisation
config of the released checkpoint)."""

from __future__ import annotations

import torch

from steadytune.model.attention import EAGER_ONLY_MODEL_TYPES

# Qwen3.5 / Qwen3-Next: three gated DeltaNet layers, then one full-attention layer (full_attention_interval 4).
def _hybrid_layers(n: int) -> list[str]:
    return (["linear_attention"] * 3 + ["full_attention"]) * (n // 4)
_QWEN35_ROPE = dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25)

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
    # --- mixtures of experts (transformers 5 fuses each layer's routed experts into 3-D parameters) ---
    # Qwen3-30B-A3B: 128 experts of width 768, 8 a token (3.3B of 30.5B parameters active); no shared expert.
    "qwen3-30b-a3b": dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                          num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, num_hidden_layers=48,
                          num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
                          max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                          decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001,
                          tie_word_embeddings=False),
    # gpt-oss-20b in bf16: 32 experts of width 2880, 4 a token, with biases; attention with sinks (eager only in
    # transformers), sliding windows of 128 on every other layer, YaRN RoPE.
    "gpt-oss-20b": dict(model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_local_experts=32,
                        num_experts_per_tok=4, num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8,
                        head_dim=64, vocab_size=201088, sliding_window=128,
                        layer_types=["sliding_attention", "full_attention"] * 12, attention_bias=True,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, swiglu_limit=7.0,
                        router_aux_loss_coef=0.9, tie_word_embeddings=False,
                        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                             beta_slow=1.0, original_max_position_embeddings=4096, truncate=False)),
    # DeepSeek-V2-Lite: multi-head latent attention (no q compression), 64 routed experts (6 a token) and 2 shared
    # experts in every layer but the first, which is a dense MLP.
    "deepseek-v2-lite": dict(model_type="deepseek_v2", hidden_size=2048, intermediate_size=10944,
                             moe_intermediate_size=1408, n_routed_experts=64, n_shared_experts=2,
                             num_experts_per_tok=6, first_k_dense_replace=1, num_hidden_layers=27,
                             num_attention_heads=16, num_key_value_heads=16, kv_lora_rank=512, q_lora_rank=None,
                             qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_group=1, topk_group=1,
                             topk_method="greedy", norm_topk_prob=False, routed_scaling_factor=1.0,
                             vocab_size=102400, max_position_embeddings=163840, rms_norm_eps=1e-6,
                             tie_word_embeddings=False,
                             rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0,
                                                  beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707,
                                                  original_max_position_embeddings=4096)),
    # Qwen1.5-MoE-A2.7B (qwen2_moe): 60 experts of width 1408, 4 a token, and a shared expert of width 5632 behind a
    # sigmoid gate.
    "qwen1.5-moe-a2.7b": dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632,
                              moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
                              num_experts_per_tok=4, norm_topk_prob=False, num_hidden_layers=24,
                              num_attention_heads=16, num_key_value_heads=16, vocab_size=151936,
                              max_position_embeddings=8192, rope_theta=1000000.0, rms_norm_eps=1e-6,
                              decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False),
    # Mixtral-8x7B: 8 experts of width 14336, 2 a token (46.7B parameters, 12.9B active).
    "mixtral-8x7b": dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_local_experts=8,
                         num_experts_per_tok=2, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         vocab_size=32000, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-5,
                         sliding_window=None, router_aux_loss_coef=0.02, tie_word_embeddings=False),
    # --- the 2026 generation: gated DeltaNet linear attention (3 of every 4 layers) beside gated full attention, and
    # Gemma 4's per-layer inputs. Qwen3.5's checkpoints are vision-language; these are their text models (the config's
    # text_config), which is what a text fine-tune trains. Full attention rotates a quarter of each head
    # (partial_rotary_factor 0.25) at rope_theta 1e7.
    # Qwen3.5-0.8B (tied head): 24 layers of width 1024, FFN 3584, 8 heads over 2 KV heads of 256 (THUDM/slime
    # scripts/models/qwen3.5-0.8B.sh, the released model's Megatron arguments); its DeltaNet layers have 16 key and 16
    # value heads of 128 (its public descriptions; slime's file does not list them).
    "qwen3.5-0.8b": dict(model_type="qwen3_5_text", hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                         linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                         linear_conv_kernel_dim=4, layer_types=_hybrid_layers(24), vocab_size=248320,
                         max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters=_QWEN35_ROPE),
    # Qwen3.5-27B (untied): 64 layers of width 5120, FFN 17408, 24 heads over 4 KV heads of 256, DeltaNet 16 key / 48
    # value heads of 128 (Qwen/Qwen3.5-27B config.json's text_config, as public tools quote it; slime's
    # qwen3.5-27B.sh agrees on every width it lists).
    "qwen3.5-27b": dict(model_type="qwen3_5_text", hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
                        num_attention_heads=24, num_key_value_heads=4, head_dim=256, linear_num_key_heads=16,
                        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
                        linear_conv_kernel_dim=4, layer_types=_hybrid_layers(64), vocab_size=248320,
                        max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        rope_parameters=_QWEN35_ROPE),
    # Qwen3.5-35B-A3B: 40 layers of width 2048, 256 experts of width 512 (8 a token) and a gated shared expert of 512,
    # 16 heads over 2 KV heads of 256, DeltaNet 16 / 32 heads of 128 (transformers 5.25's Qwen3_5MoeTextConfig
    # defaults, which name this checkpoint; slime's qwen3.5-35B-A3B.sh lists the same).
    "qwen3.5-35b-a3b": dict(model_type="qwen3_5_moe_text", hidden_size=2048, num_hidden_layers=40,
                            num_attention_heads=16, num_key_value_heads=2, head_dim=256, moe_intermediate_size=512,
                            shared_expert_intermediate_size=512, num_experts=256, num_experts_per_tok=8,
                            linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                            linear_value_head_dim=128, linear_conv_kernel_dim=4, layer_types=_hybrid_layers(40),
                            vocab_size=248320, max_position_embeddings=262144, rms_norm_eps=1e-6,
                            router_aux_loss_coef=0.001, tie_word_embeddings=False, rope_parameters=_QWEN35_ROPE),
    # Qwen3-Next-80B-A3B: 48 layers of width 2048, 512 experts of width 512 (10 a token) and a gated shared expert of
    # 512, 16 heads over 2 KV heads of 256, DeltaNet 16 / 32 heads of 128, Qwen3's vocabulary (transformers 5.25's
    # Qwen3NextConfig, which names Qwen/Qwen3-Next-80B-A3B-Instruct; slime's qwen3-next-80B-A3B.sh agrees). 160 GB in
    # bf16: on one GPU it is benched with fewer layers (--num-layers), the same widths.
    "qwen3-next-80b-a3b": dict(model_type="qwen3_next", hidden_size=2048, intermediate_size=5120,
                               num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                               moe_intermediate_size=512, shared_expert_intermediate_size=512, num_experts=512,
                               num_experts_per_tok=10, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                               linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                               linear_value_head_dim=128, linear_conv_kernel_dim=4, layer_types=_hybrid_layers(48),
                               vocab_size=151936, max_position_embeddings=262144, rms_norm_eps=1e-6,
                               router_aux_loss_coef=0.001, tie_word_embeddings=False, rope_parameters=_QWEN35_ROPE),
    # Gemma 4 E2B: transformers 5.25's Gemma4TextConfig defaults, which name google/gemma-4-e2b-it (30 layers of width
    # 2304, 8 heads over 4 KV heads of 256, 5 sliding-window layers of 512 to each full one, per-layer inputs of 256
    # from a second 262,144-row table); not checked against the checkpoint's own config.json here.
    "gemma4-e2b": dict(model_type="gemma4_text", hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_size_per_layer_input=256,
                       vocab_size_per_layer_input=262144, vocab_size=262144, sliding_window=512,
                       layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 5,
                       max_position_embeddings=131072, tie_word_embeddings=True),
    # Gemma 4 31B: 60 layers of width 5376, FFN 21504, 32 heads over 16 KV heads of 256 (slime's gemma4-31B.sh, the
    # released model's Megatron arguments); no per-layer inputs (those are the E models'); the rest (sliding window,
    # layer pattern, full layers' global head size) transformers 5.25's Gemma4TextConfig defaults.
    "gemma4-31b": dict(model_type="gemma4_text", hidden_size=5376, intermediate_size=21504, num_hidden_layers=60,
                       num_attention_heads=32, num_key_value_heads=16, head_dim=256, hidden_size_per_layer_input=0,
                       vocab_size=262144, sliding_window=512,
                       layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 10,
                       max_position_embeddings=131072, tie_word_embeddings=True),
    # A Qwen3.5 of a few million parameters (3 gated DeltaNet layers, then full attention), for tests and CPU runs.
    "hybrid-tiny": dict(model_type="qwen3_5_text", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                        linear_conv_kernel_dim=4, layer_types=_hybrid_layers(4), vocab_size=2048,
                        max_position_embeddings=4096, tie_word_embeddings=True),
    # A Qwen3-MoE of a few million parameters, for tests and CPU smoke runs: 8 experts, 2 a token.
    "moe-tiny": dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                     num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=2048,
                     max_position_embeddings=4096, tie_word_embeddings=False),
}

# Config keys that list one entry per layer: cut to the first N layers with the depth (--num-layers).
_PER_LAYER_KEYS = ("layer_types",)


def shape_config(name: str, num_layers: int | None = None) -> dict:
    """The named shape's config kwargs (model_type first), `num_layers` deep if given: the same widths, fewer or more
    layers (per-layer lists such as gpt-oss's alternating layer_types follow the depth)."""
    if name not in SHAPES:
        raise KeyError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}")
    spec = dict(SHAPES[name])
    if num_layers is not None and num_layers != spec["num_hidden_layers"]:
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        for key in _PER_LAYER_KEYS:
            if spec.get(key):
                pattern = spec[key]
                spec[key] = [pattern[i % len(pattern)] for i in range(num_layers)]
        if spec.get("first_k_dense_replace", 0) >= num_layers:
            raise ValueError(f"{name} with {num_layers} layers would have no MoE layer (its first "
                             f"{spec['first_k_dense_replace']} are dense)")
        spec["num_hidden_layers"] = num_layers
    return spec


def is_moe_shape(name: str) -> bool:
    """A mixture-of-experts shape (routed experts in its config)."""
    spec = SHAPES[name]
    return any(spec.get(key) for key in ("num_experts", "num_local_experts", "n_routed_experts"))


def attention_for(name: str, asked: str) -> str:
    """The attn_implementation a shape is built with: `asked`, unless its model type runs eager attention only
    (gpt-oss's attention sinks: model/attention.EAGER_ONLY_MODEL_TYPES)."""
    return "eager" if SHAPES[name]["model_type"] in EAGER_ONLY_MODEL_TYPES else asked


def build_shape(name: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                attn_implementation: str = "sdpa", seed: int = 0, num_layers: int | None = None):
    """A causal LM of the named shape with random weights, created directly on `device` in `dtype` (the meta device
    builds any shape without memory); `num_layers` overrides its depth (shape_config). A model type that runs only
    eager attention (gpt-oss) gets eager whatever is asked."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = shape_config(name, num_layers)
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                                 attn_implementation=attention_for(name, attn_implementation))
    return model
