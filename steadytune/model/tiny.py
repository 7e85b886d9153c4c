"""Tiny random models and a locally trained tokenizer, for tests and offline smoke runs.

Nothing here touches a model hub: the tokenizer is a byte-level BPE trained in a few milliseconds on a
built-in corpus (English and Chinese, so Chinese labels split into several tokens as they do in real
tokenizers), and the models are built from config with random weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from steadytune.model.attention import EAGER_ONLY_MODEL_TYPES

SPECIAL_TOKENS = [
    "<pad>", "<eos>", "<bos>", "<unk>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<start_of_turn>", "<end_of_turn>",
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<think>", "</think>",
]

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Give three tips for staying healthy. Eat a balanced diet and exercise.",
    "What is the capital of France? The capital of France is Paris.",
    "Hello! I am an AI assistant. How can I assist you today?",
    "user assistant system model human gpt",
    "Review: this product is great. Sentiment: positive negative neutral",
    "这个商品很好，质量不错，物流很快，非常满意。",
    "太差了，等了一个小时没人理，再也不买了。",
    "判断下面这段话的情绪类别。文本：情绪：",
    "好评 差评 推荐 失望 喜欢 讨厌",
    "书的内容很精彩，值得一读。包装破损，很失望。",
    "0123456789 , . ! ? : ; ( ) [ ] { } \" ' - _ / \\ \n",
]


def build_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with the special tokens of the common chat templates."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   bos_token="<bos>", unk_token="<unk>")
    fast.padding_side = "right"
    return fast


# A gated DeltaNet layer's sizes (Qwen3.5 / Qwen3-Next): 4-token conv window, 2 key heads for 4 value heads.
_GATED_DELTANET = dict(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                       linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                       linear_conv_kernel_dim=4)

TINY_CONFIGS = {
    "qwen2": dict(model_type="qwen2", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=True),
    "llama": dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False),
    # Qwen3: head_dim 128 as in every released Qwen3 (transformers' GGUF reader assumes it).
    "qwen3": dict(model_type="qwen3", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=128, max_position_embeddings=512,
                  tie_word_embeddings=True),
    "gemma3": dict(model_type="gemma3_text", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=512,
                   sliding_window=16, query_pre_attn_scalar=8, tie_word_embeddings=True),
    # Mixtures of experts, as transformers 5 builds them (routed experts fused into 3-D parameters): 4 experts, 2
    # a token; Qwen2-MoE and DeepSeek-V2 add a shared expert, gpt-oss stores its experts transposed with biases.
    "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                      num_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=512, tie_word_embeddings=False),
    "qwen2_moe": dict(model_type="qwen2_moe", hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                      shared_expert_intermediate_size=24, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False),
    "mixtral": dict(model_type="mixtral", hidden_size=32, intermediate_size=16, num_local_experts=4,
                    num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=512, tie_word_embeddings=False),
    "gpt_oss": dict(model_type="gpt_oss", hidden_size=32, intermediate_size=16, num_local_experts=4,
                    num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=8, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                    tie_word_embeddings=False),
    "deepseek_v2": dict(model_type="deepseek_v2", hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, num_hidden_layers=2,
                        first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16,
                        q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                        topk_group=1, max_position_embeddings=512, tie_word_embeddings=False),
    # The 2026 generation. Qwen3.5 / Qwen3.5-MoE / Qwen3-Next: one gated DeltaNet (linear-attention) layer, then one
    # full-attention layer (the released models repeat 3 linear + 1 full); 2 key heads serve 4 value heads as in the
    # released ones (16 / 32). Qwen3.5's released checkpoints are vision-language (model_type qwen3_5 with a
    # text_config): these are their text models, which transformers builds as *ForCausalLM. The MoE ones route 2 of
    # 4 experts and add a gated shared expert. Gemma 4: per-layer inputs (a second embedding table, 8 wide here,
    # 256 in the released E2B/E4B, gated into every layer).
    "qwen3_5": dict(model_type="qwen3_5_text", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, **_GATED_DELTANET,
                    max_position_embeddings=512, tie_word_embeddings=True),
    "qwen3_5_moe": dict(model_type="qwen3_5_moe_text", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=8, **_GATED_DELTANET, moe_intermediate_size=16,
                        shared_expert_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                        max_position_embeddings=512, tie_word_embeddings=False),
    "qwen3_next": dict(model_type="qwen3_next", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, **_GATED_DELTANET,
                       moe_intermediate_size=16, shared_expert_intermediate_size=24, num_experts=4,
                       num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False),
    "gemma4": dict(model_type="gemma4_text", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=8, sliding_window=16,
                   layer_types=["sliding_attention", "full_attention"], hidden_size_per_layer_input=8,
                   vocab_size_per_layer_input=None, max_position_embeddings=512, tie_word_embeddings=True),
}
MOE_KINDS = ("qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "deepseek_v2", "qwen3_5_moe", "qwen3_next")
# The model families of the 2026 generation (tests/test_models2026.py runs each through every command).
MODELS_2026 = ("qwen3_5", "qwen3_5_moe", "qwen3_next", "gemma4")


def build_model(kind: str = "qwen2", tokenizer: PreTrainedTokenizerFast | None = None, seed: int = 0,
                attn_implementation: str = "sdpa", **overrides):
    """A tiny random decoder of the given family, sized to the tokenizer's vocabulary; `overrides` change its
    config (e.g. head_dim)."""
    from transformers import AutoConfig

    tokenizer = tokenizer or build_tokenizer()
    spec = {**TINY_CONFIGS[kind], **overrides}
    model_type = spec.pop("model_type")
    if "vocab_size_per_layer_input" in spec and spec["vocab_size_per_layer_input"] is None:
        spec["vocab_size_per_layer_input"] = len(tokenizer)   # Gemma 4's per-layer table: the tokenizer's size
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, **spec)
    torch.manual_seed(seed)
    if model_type in EAGER_ONLY_MODEL_TYPES:   # gpt-oss: no SDPA path in transformers (its attention sinks)
        attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    return model


def save_tiny_model(folder: str | Path, kind: str = "qwen2", seed: int = 0,
                    tokenizer: PreTrainedTokenizerFast | None = None, **overrides) -> Path:
    """Write a tiny model + tokenizer (build_tokenizer's unless one is given) as a Hugging Face folder that
    `model_name_or_path` can point at."""
    folder = Path(folder)
    tokenizer = tokenizer or build_tokenizer()
    model = build_model(kind, tokenizer, seed=seed, **overrides)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# Special tokens of every template in data/templates.py, so golden files can be made with one vocabulary.
CHAT_SPECIAL_TOKENS = SPECIAL_TOKENS + [
    "<|eom_id|>", "<|im_sep|>", "<｜User｜>", "<｜Assistant｜>", "[gMASK]", "<sop>", "<|user|>", "<|assistant|>",
    "<|system|>", "<|observation|>", "<|end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
]


def build_chat_tokenizer(style: str = "bytelevel", vocab_size: int = 640, extra_text: str = "") -> PreTrainedTokenizerFast:
    """A tiny tokenizer that knows every template's special tokens, in one of two styles real models use:
    `bytelevel` (GPT-2 / Qwen / Llama 3: no prefix space, no bos added to plain text) or `metaspace`
    (SentencePiece-like, Llama 2 / Gemma: a prefix space on each encoded piece, and bos added to plain text),
    so a template's per-piece tokenisation is exercised both ways. `extra_text` is added to the training text (the
    metaspace style has no byte fallback: every character it must encode has to be in its alphabet). Made once and saved for the golden files
    (tools/make_template_golden.py), which are read back from those saved files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if style == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif style == "metaspace":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = sorted(set("".join(_CORPUS + CHAT_SPECIAL_TOKENS) + extra_text) - {" "}) + ["▁"]
    else:
        raise ValueError(f"style must be bytelevel or metaspace, got {style!r}")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=CHAT_SPECIAL_TOKENS,
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator((_CORPUS + ([extra_text] if extra_text else [])) * 4, trainer=trainer)
    if style == "metaspace":
        bos = tok.token_to_id("<bos>")
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                           special_tokens=[("<bos>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>")
    fast.padding_side = "right"
    return fast
