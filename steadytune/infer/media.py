"""Prompts with images, for inference (chat, predict, serve, eval's label scoring): the conversation's `<image>`
placeholders expanded by the template's media plugin, the images opened, resized and turned into pixels exactly as
training did (data/multimodal/), and batches of such prompts with their pixels and token-type ids.

Generation with images goes through transformers' `generate` (eval/scoring.generate_texts, serve's media jobs): the
decode engine of model/decode/ takes token ids only, so it serves the text requests and a vision-language model's
text-only ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from steadytune.data.multimodal.encode import MediaContext, load_images
from steadytune.data.multimodal.plugins import IMAGE_PLACEHOLDER, plugin_for
from steadytune.data.multimodal.preprocess import MediaSettings
from steadytune.data.multimodal.processor import load_media_processor
from steadytune.errors import DataError
from steadytune.infer.generate import conversation_ids
from steadytune.model.vision import is_vision_model

@dataclass
class MediaPrompt:
    """One prompt's ids and its images' processor outputs (pixel_values, image_grid_thw when the family has it)."""
    ids: list[int]
    pixels: dict


def media_settings(cfg) -> MediaSettings:
    """The run's image keys (LLaMA-Factory's image_max_pixels / image_min_pixels ...), as training read them."""
    fields = {f.name for f in dataclasses.fields(MediaSettings)}
    return MediaSettings(**{name: getattr(cfg.data, name) for name in fields if hasattr(cfg.data, name)})


def model_folder(model) -> str:
    """Where the base model was loaded from (its processor files sit beside its weights)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return str(base.config._name_or_path or base.name_or_path)


class VisionPrompts:
    """Encodes conversations with images for one loaded VLM and its run's template."""

    def __init__(self, ctx: MediaContext, template: Any, tokenizer: Any):
        self.ctx, self.template, self.tokenizer = ctx, template, tokenizer

    @classmethod
    def for_model(cls, cfg, model, tokenizer, template, folder: str | Path | None = None) -> "VisionPrompts | None":
        """None for a text model. A VLM whose template has no media plugin (a text template) is an error: its images
        would have no tokens to go to."""
        if not is_vision_model(model):
            return None
        plugin = plugin_for(cfg.data.template)
        if plugin is None:
            raise DataError(f"template: {cfg.data.template} has no image tokens; a vision-language model's images need "
                            "its own template (qwen2_vl, qwen3_vl, qwen3_vl_nothink, gemma3, llava)")
        processor = load_media_processor(folder or model_folder(model), tokenizer)
        return cls(MediaContext(plugin, processor, media_settings(cfg)), template, tokenizer)

    def encode(self, messages: list[dict], system: str | None, images: Sequence[Any], where: str) -> MediaPrompt:
        """The generation prompt after `messages` with `images` (paths, data URLs, bytes or PIL images). As
        LLaMA-Factory's chat: a conversation without `<image>` placeholders gets them at the start of its first
        message; otherwise there must be one per image."""
        messages = [dict(m) for m in messages]
        placed = sum(str(m.get("content", "")).count(IMAGE_PLACEHOLDER) for m in messages)
        if images and placed == 0:
            messages[0]["content"] = IMAGE_PLACEHOLDER * len(images) + str(messages[0]["content"])
        elif placed != len(images):
            raise DataError(f"{where}: {placed} {IMAGE_PLACEHOLDER} placeholder(s) in the messages but {len(images)} "
                            "image(s)")
        if not images:
            return MediaPrompt(conversation_ids(self.template, self.tokenizer, messages, system), {})
        opened = load_images([_as_ref(i) for i in images], where, self.ctx)
        pixels = self.ctx.plugin.pixel_inputs(opened, [], self.ctx.processor, self.ctx.pan_and_scan)
        messages = self.ctx.plugin.expand(messages, pixels, self.ctx.processor)
        pixels.pop("num_crops", None)   # the crops are among the pixel values already
        ids = conversation_ids(self.template, self.tokenizer, messages, system)
        return MediaPrompt(ids, {k: v for k, v in pixels.items() if isinstance(v, torch.Tensor)})


def _as_ref(image: Any) -> Any:
    """A PIL image as PNG bytes (what data/multimodal opens); anything else as it is."""
    if hasattr(image, "save") and hasattr(image, "size"):
        import io

        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue()
    return image
