"""Tiny random vision-language models, for tests and offline smoke runs: Qwen2.5-VL, Qwen3-VL, Gemma 3 (its multimodal
Gemma3ForConditionalGeneration) and LLaVA, each built from config with a vision tower of two small blocks (a few
hundred thousand parameters in all), saved as a Hugging Face folder with a tokenizer that knows the family's vision
tokens and the family's real image processor (transformers' Pillow backend: no torchvision needed).

The vision sizes are chosen so that an image costs a handful of placeholder tokens: Qwen2.5-VL (14-pixel patches,
2x2 merged) gives one token per 28x28 pixels, at most 4; Qwen3-VL (16-pixel patches) one per 32x32, at most 4;
Gemma 3 4 soft tokens per image (a 32x32 image, 8-pixel patches pooled 2x2); LLaVA 16 (a 32x32 image, 8-pixel
patches, the CLS feature dropped as real LLaVA 1.5 does).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from steadytune.model.tiny import build_chat_tokenizer

# The vision tokens each family's tokenizer carries (their names in the released checkpoints).
QWEN_VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
GEMMA3_VISION_TOKENS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
LLAVA_VISION_TOKENS = ("<image>",)
VISION_TOKENS = {"qwen2_5_vl": QWEN_VISION_TOKENS, "qwen3_vl": QWEN_VISION_TOKENS,
                 "gemma3_vl": GEMMA3_VISION_TOKENS, "llava": LLAVA_VISION_TOKENS,
                 "qwen3_vl_moe": QWEN_VISION_TOKENS, "qwen3_5": QWEN_VISION_TOKENS}
# The four families the tests cover everywhere; qwen3_vl_moe (Qwen3-VL's mixture of experts: 4 experts, 2 a token)
# is built for the MoE checks; qwen3_5 (Qwen3.5: Qwen3-VL's vision tower before a hybrid language model, one
# Gated DeltaNet layer then one full-attention layer) for LLaMA-Factory's qwen3_5 template and its v1 example.
TINY_VLM_KINDS = ("qwen2_5_vl", "qwen3_vl", "gemma3_vl", "llava")
# The chat template LLaMA-Factory pairs with each family (template: ...).
TINY_VLM_TEMPLATES = {"qwen2_5_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl_nothink", "gemma3_vl": "gemma3",
                      "llava": "llava", "qwen3_vl_moe": "qwen3_vl_nothink", "qwen3_5": "qwen3_5_nothink"}

# Weights drawn 10x wider than transformers' 0.02: at width 32 the default leaves every logit within about +-1 (the tied
# head's rows have norm 0.11) and attention near uniform, so an image's one token barely reaches the answer and a
# test task (red square -> "red") is not learnable in tens of steps; at 0.2 it is (tests/test_vlm_e2e.py).
INITIALIZER_RANGE = 0.2
_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             initializer_range=INITIALIZER_RANGE)
# Qwen's multimodal rope splits each head's rotary half (head_dim 8 -> 4 frequencies) over time, height and width.
_MROPE = {"mrope_section": [1, 1, 2]}
_QWEN_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, spatial_merge_size=2,
                    temporal_patch_size=2, initializer_range=INITIALIZER_RANGE)


def vision_tokenizer(kind: str, tokenizer: PreTrainedTokenizerFast | None = None) -> PreTrainedTokenizerFast:
    """The tiny chat tokenizer (every template's special tokens) plus `kind`'s vision tokens, added as special tokens
    so that none is ever split."""
    tokenizer = tokenizer or build_chat_tokenizer("bytelevel")
    missing = [t for t in VISION_TOKENS[kind] if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    return tokenizer


# Gemma 3's tokenizer names its vision tokens (tokenizer.boi_token, ...), as the released tokenizer_config.json does.
GEMMA3_NAMED_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}


def _ids(tokenizer, *tokens: str) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def tiny_vlm_config(kind: str, tokenizer: PreTrainedTokenizerFast):
    """The config of a tiny `kind` model whose vocabulary and vision token ids are the tokenizer's."""
    from transformers import AutoConfig

    common = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                  bos_token_id=tokenizer.bos_token_id)
    if kind in ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"):
        start, end, image, video = _ids(tokenizer, *QWEN_VISION_TOKENS)
        ids = dict(vision_start_token_id=start, vision_end_token_id=end, image_token_id=image, video_token_id=video)
        if kind == "qwen2_5_vl":
            text = dict(_TEXT, **common, max_position_embeddings=512, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, **_MROPE})
            vision = dict(_QWEN_VISION, patch_size=14, window_size=56, fullatt_block_indexes=[1])
        else:
            text = dict(_TEXT, **common, head_dim=8, max_position_embeddings=512, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_interleaved": True,
                                         **_MROPE})
            vision = dict(_QWEN_VISION, patch_size=16, num_position_embeddings=16, deepstack_visual_indexes=[1])
            if kind == "qwen3_vl_moe":
                text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1)
            if kind == "qwen3_5":
                # every rotary dimension turns (Qwen3.5 turns a quarter: with head_dim 8 that leaves 1 frequency,
                # fewer than mrope_section's 4); no deepstack (Qwen3.5's vision tower has none)
                text["rope_parameters"]["partial_rotary_factor"] = 1.0
                text.update(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                            linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                            linear_conv_kernel_dim=4)
                vision.pop("deepstack_visual_indexes")
        return AutoConfig.for_model(kind, text_config=text, vision_config=vision, tie_word_embeddings=True, **ids,
                                    **common)
    if kind == "gemma3_vl":
        boi, eoi, image = _ids(tokenizer, *GEMMA3_VISION_TOKENS)
        text = dict(_TEXT, **common, num_key_value_heads=1, head_dim=8, max_position_embeddings=512,
                    sliding_window=16, query_pre_attn_scalar=8)
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                      patch_size=8, vision_use_head=False, initializer_range=INITIALIZER_RANGE)
        return AutoConfig.for_model("gemma3", text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                    boi_token_index=boi, eoi_token_index=eoi, image_token_index=image, **common)
    if kind == "llava":
        (image,) = _ids(tokenizer, *LLAVA_VISION_TOKENS)
        text = dict(_TEXT, **common, model_type="llama", max_position_embeddings=512, tie_word_embeddings=False)
        vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, image_size=32, patch_size=8, projection_dim=32,
                      initializer_range=INITIALIZER_RANGE)
        return AutoConfig.for_model("llava", text_config=text, vision_config=vision, image_token_index=image,
                                    vision_feature_layer=-1, vision_feature_select_strategy="default",
                                    tie_word_embeddings=False, **common)
    raise ValueError(f"unknown tiny vision-language model {kind!r}; choose one of {', '.join(VISION_TOKENS)}")


def tiny_image_processor(kind: str):
    """`kind`'s own image processor (the Pillow backend), sized for the tiny vision tower."""
    if kind == "qwen2_5_vl":
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        return Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=4 * 28 * 28, patch_size=14, merge_size=2,
                                        temporal_patch_size=2)
    if kind in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5"):
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        return Qwen2VLImageProcessorPil(min_pixels=32 * 32, max_pixels=4 * 32 * 32, patch_size=16, merge_size=2,
                                        temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    if kind == "gemma3_vl":
        from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

        return Gemma3ImageProcessorPil(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    if kind == "llava":
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

        return CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    raise ValueError(f"unknown tiny vision-language model {kind!r}; choose one of {', '.join(VISION_TOKENS)}")


def build_vlm(kind: str = "qwen2_5_vl", tokenizer: PreTrainedTokenizerFast | None = None, seed: int = 0,
              attn_implementation: str = "sdpa"):
    """A tiny random `kind` model (transformers' AutoModelForImageTextToText class for it)."""
    from transformers import AutoModelForImageTextToText

    tokenizer = vision_tokenizer(kind, tokenizer)
    config = tiny_vlm_config(kind, tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, attn_implementation=attn_implementation)
    projection = getattr(getattr(model.model, "multi_modal_projector", None), "mm_input_projection_weight", None)
    if projection is not None:
        # Gemma 3 starts its projection at zero (every image feature 0): a released checkpoint's is trained, and a
        # random one lets a test see that the image changes the output
        with torch.no_grad():
            projection.normal_(std=config.text_config.initializer_range)
    return model


def save_tiny_vlm(folder: str | Path, kind: str = "qwen2_5_vl", seed: int = 0,
                  tokenizer: PreTrainedTokenizerFast | None = None) -> Path:
    """Write a tiny `kind` model, its tokenizer and its image processor as a folder `model_name_or_path` can name."""
    folder = Path(folder)
    tokenizer = vision_tokenizer(kind, tokenizer)
    model = build_vlm(kind, tokenizer, seed=seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if kind == "gemma3_vl":   # the named tokens, as the released tokenizer_config.json carries them
        config_file = folder / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config["extra_special_tokens"] = GEMMA3_NAMED_TOKENS
        config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    save_tiny_processor(folder, kind)
    return folder


def save_tiny_processor(folder: Path, kind: str) -> None:
    """The family's image processor, and where transformers assembles the whole processor without torchvision (Gemma
    3, LLaVA), that processor with its settings (processor_config.json: Gemma 3's image_seq_length, LLaVA's patch
    size and CLS handling), as the released checkpoints ship them. Qwen-VL's processor needs torchvision (its video
    processor): its image processor alone is saved, as loading falls back to the parts."""
    from transformers import AutoTokenizer

    image_processor = tiny_image_processor(kind)
    if kind == "gemma3_vl":
        from transformers import Gemma3Processor

        processor = Gemma3Processor(image_processor, AutoTokenizer.from_pretrained(folder), image_seq_length=4)
    elif kind == "llava":
        from transformers import LlavaProcessor

        processor = LlavaProcessor(image_processor, AutoTokenizer.from_pretrained(folder), patch_size=8,
                                   vision_feature_select_strategy="default", num_additional_image_tokens=1)
    else:
        image_processor.save_pretrained(folder)
        return
    processor.save_pretrained(folder)
