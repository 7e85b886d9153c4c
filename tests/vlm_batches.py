"""Model-side test batches for the tiny vision-language models: a prompt with one image's placeholder tokens (as many
as the family's vision tower gives features for it) and a labelled answer, made directly from the tokenizer and the
family's image processor. The data side (LLaMA-Factory's rows, mm_plugin expansion, collators) is tested in its own
files; these batches only feed the model code."""

from __future__ import annotations

import torch
from PIL import Image

from steadytune.data.encode import IGNORE_INDEX
from steadytune.model.tiny_vlm import build_vlm, tiny_image_processor, vision_tokenizer


def square(colour: tuple[int, int, int], size: int = 32) -> Image.Image:
    return Image.new("RGB", (size, size), colour)


def placeholder_ids(kind: str, model, tokenizer, pixels: dict) -> list[int]:
    """The tokens standing for one image in the prompt."""
    config = model.config
    if kind in ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"):
        t, h, w = pixels["image_grid_thw"][0].tolist()
        merge = config.vision_config.spatial_merge_size
        return ([config.vision_start_token_id] + [config.image_token_id] * (t * h * w // merge**2)
                + [config.vision_end_token_id])
    if kind == "gemma3_vl":
        return [config.boi_token_id] + [config.image_token_id] * config.mm_tokens_per_image + [config.eoi_token_id]
    patches = (config.vision_config.image_size // config.vision_config.patch_size) ** 2
    return [config.image_token_id] * patches


def image_batch(kind: str, model, tokenizer, rows: list[tuple[Image.Image, str, str]]) -> dict:
    """A right-padded batch of (image, prompt, answer) rows; labels on the answer tokens (and eos) only."""
    processor = tiny_image_processor(kind)
    sequences, labels, pixel_values, grids = [], [], [], []
    for image, prompt, answer in rows:
        pixels = processor(images=[image], return_tensors="pt")
        prompt_ids = (placeholder_ids(kind, model, tokenizer, pixels)
                      + tokenizer(prompt, add_special_tokens=False)["input_ids"])
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        sequences.append(prompt_ids + answer_ids)
        labels.append([IGNORE_INDEX] * len(prompt_ids) + answer_ids)
        pixel_values.append(pixels["pixel_values"])
        if "image_grid_thw" in pixels:
            grids.append(pixels["image_grid_thw"])
    width = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id
    batch = {
        "input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in sequences]),
        "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences]),
        "labels": torch.tensor([s + [IGNORE_INDEX] * (width - len(s)) for s in labels]),
        "pixel_values": torch.cat(pixel_values),
    }
    if grids:
        batch["image_grid_thw"] = torch.cat(grids)
        batch["mm_token_type_ids"] = (batch["input_ids"] == model.config.image_token_id).int()
    if kind == "gemma3_vl":
        batch["token_type_ids"] = (batch["input_ids"] == model.config.image_token_id).long()
    return batch


def tiny(kind: str, seed: int = 0):
    tokenizer = vision_tokenizer(kind)
    return build_vlm(kind, tokenizer, seed=seed), tokenizer
