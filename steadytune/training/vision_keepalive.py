"""Keeping every rank in the vision tower's collectives when some micro-batches have no image.

Our step skips the vision tower on a batch without pixels (transformers' VLM forward encodes only what it is given:
tests/test_vlm_train.py). On one process that is free time. Across processes it can hang: with the weights sharded
(FSDP, DeepSpeed ZeRO-3) the tower's forward all-gathers its parameters, and with a trainable tower or projector
(freeze_vision_tower / freeze_multi_modal_projector: false) under DDP or ZeRO every rank's backward reduces their
gradients; a rank that skipped the tower waits on a different collective than the others. LLaMA-Factory injects a
fake image into image-free batches for the same reason (its mm_plugin, under ZeRO-3 / FSDP). Here a rank whose batch
has no pixels encodes one blank image and adds its features times zero to the loss: the same collectives on every
rank, the loss and the gradients unchanged. With a frozen, unsharded tower no collective involves it, so nothing
is added.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from PIL import Image

from steadytune.model.vision import PIXEL_KEYS, vision_parts


def keep_vision_tower_in_step(objective, model: torch.nn.Module, data, world_size: int, params_sharded: bool,
                              decide: Callable[[str, Any, str], None]) -> None:
    """Image-free micro-batches still run the vision tower (a zero-weight blank image) where a rank skipping it
    would hang the others (keepalive_reason says when); `decide` records it (RunConfig.decide)."""
    if getattr(data, "media", None) is None or not hasattr(objective, "keep_vision"):
        return
    reason = keepalive_reason(model, world_size, params_sharded)
    if reason is not None:
        objective.keep_vision = VisionKeepAlive(model, blank_image_inputs(data.media))
        decide("vision_keepalive", True, f"{reason}: a micro-batch without images encodes one blank image, "
               "weighted 0 in the loss, so every rank joins the same collectives (LLaMA-Factory's fake image)")


def keepalive_reason(model: torch.nn.Module, world_size: int, params_sharded: bool) -> str | None:
    """Why image-free batches must still run the vision tower on this run (None: they need not)."""
    parts = vision_parts(model)
    if parts is None or world_size <= 1:
        return None
    if params_sharded:
        return "the vision tower's weights are sharded (FSDP / ZeRO-3): its forward all-gathers them on every rank"
    fragments = parts.vision_tower + parts.projector
    trainable = [n for n, p in model.named_parameters() if p.requires_grad and any(f in n for f in fragments)]
    if trainable:
        return (f"{len(trainable)} vision tower / projector tensors train: every rank's backward reduces their "
                "gradients")
    return None


def blank_image_inputs(ctx: Any) -> dict:
    """The processor's tensors for one blank image (data/multimodal/encode.py's MediaContext)."""
    side = 64 if ctx.plugin.qwen else 32
    inputs = ctx.plugin.pixel_inputs([Image.new("RGB", (side, side), (0, 0, 0))], [], ctx.processor)
    return {k: v for k, v in inputs.items() if k in ("pixel_values", "image_grid_thw")}


class VisionKeepAlive:
    """batch -> a zero that ran the vision tower and projector (only for batches without pixels; a plain 0 else)."""

    def __init__(self, model: torch.nn.Module, blank: dict):
        self.model = model
        self.blank = blank

    def __call__(self, batch: dict, like: torch.Tensor) -> torch.Tensor:
        if any(batch.get(key) is not None for key in PIXEL_KEYS):
            return torch.zeros((), dtype=like.dtype, device=like.device)
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        inputs = {k: v.to(like.device) for k, v in self.blank.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(base.dtype)
        features = base.model.get_image_features(**inputs)
        return sum(t.float().sum() for t in _tensors(features)).to(like.dtype) * 0.0


def _tensors(value) -> list[torch.Tensor]:
    """Every tensor in get_image_features' output (a tensor, a tuple / list of them, or a model output)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []
