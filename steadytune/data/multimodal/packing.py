"""Packing multimodal examples: several examples per row, each keeping its own images (LLaMA-Factory's neat_packing
semantics, hiyouga/LLaMA-Factory#10283), attention and positions kept per example.

- The text is laid out by data/packing.py's PackedCollator (rows filled first-fit, or one "varlen" row with its
  cu_seq_lens; static shapes the same way); an example is never split across rows, so an image's tokens always sit
  whole in one row, next to its example's text. Its segment ids say where each example landed, and the per-token
  extras (Qwen-VL's 3-D rope positions, token-type ids) are placed there.
- The pixels are made in the order the examples' tokens appear in the flattened batch (row by row, left to right), so
  the model, which fills media tokens with image features in that order, gives each example its own images.
- Positions restart at 0 for every example (transformers builds the block-diagonal mask from the restarts, as for
  text packing). Qwen-VL's 3-D rope positions are computed per example (rope.py) and concatenated: a packed row's
  positions equal the examples' unpacked ones (tested). Qwen's position_ids have 4 rows: the plain positions (where
  transformers finds the example boundaries), then time, height, width.
- The first label of every example is ignored (its previous token belongs to another example), as in text packing.
- With a vision geometry (a Qwen-VL tower whose attention takes cu_seqlens: training/vision_speed.py), the batch
  carries the tower's layout, worked out here (vision_layout.py), in place of the image grids.
- Static shapes (MultimodalShape): the text padded as text packing pads it, and the media to one size too: a Qwen-VL
  tower's patches by padding images (vision_layout.py), a fixed-size tower's (Gemma 3, LLaVA) by blank images whose
  features no token reads. A batch that does not fit comes out unpadded with `static: False`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from steadytune.data.multimodal.collate import TYPE_KEYS, batch_media
from steadytune.data.multimodal.encode import MediaContext
from steadytune.data.multimodal.vision_layout import (
    VisionGeometry,
    VisionShape,
    fits,
    patches_of,
    shape_for,
    static_layout,
    vision_layout,
)
from steadytune.data.packing import PackedCollator, StaticShape, pack_into_rows, static_shape_for, targets_of

# Media keys a static batch may hold; any other (videos, image sizes, crop counts) keeps the batch unpadded.
STATIC_MEDIA_KEYS = ("pixel_values",)


@dataclass(frozen=True)
class MultimodalShape:
    """One shape for every packed multimodal micro-batch: the text's (StaticShape) and the media's, either a Qwen-VL
    tower's layout (`vision`) or a number of fixed-size images (`images`)."""
    text: StaticShape
    vision: VisionShape | None = None
    images: int = 0
    media_fill: float = 1.0   # mean share of real patches (or images) in the micro-batches it was made for

    @property
    def tokens(self) -> int:
        return self.text.tokens

    @property
    def fill(self) -> float:
        return self.text.fill

    @property
    def attention(self) -> str:
        return self.text.attention

    def describe(self) -> str:
        media = (self.vision.describe() if self.vision is not None else f"{self.images} images")
        return f"{self.text.describe()}; {media}, {100 * (1 - self.media_fill):.1f}% of them padding"


def _grids(example: dict) -> list:
    return [list(g) for g in example.get("image_grid_thw") or []]


def _pixel_rows(example: dict) -> int:
    """A fixed-size tower's pixel tensors for one example: its images and their pan-and-scan crops."""
    return len(example.get("images") or []) + sum(example.get("num_crops") or [])


class MultimodalPackedCollator:
    """Packs a batch of multimodal examples into rows of at most `row_len` tokens (one row with `varlen`)."""

    def __init__(self, ctx: MediaContext, pad_token_id: int, row_len: int, varlen: bool = False,
                 rope: Callable[[dict], torch.Tensor] | None = None, geometry: VisionGeometry | None = None,
                 static: MultimodalShape | None = None, segment_ids: bool = False):
        self.ctx = ctx
        self.pad_token_id = int(pad_token_id)
        self.row_len = row_len
        self.varlen = varlen
        self.rope = rope
        self.geometry = geometry
        self.static = static
        self.segment_ids = segment_ids

    @property
    def attention(self) -> str:
        return "varlen" if self.varlen else "sdpa"

    def _like(self, **changes) -> "MultimodalPackedCollator":
        keys = dict(ctx=self.ctx, pad_token_id=self.pad_token_id, row_len=self.row_len, varlen=self.varlen,
                    rope=self.rope, geometry=self.geometry, static=self.static, segment_ids=self.segment_ids)
        return MultimodalPackedCollator(**{**keys, **changes})

    def with_layout(self, geometry: VisionGeometry) -> "MultimodalPackedCollator":
        """The same collator, its batches carrying a Qwen-VL tower's layout (vision_layout.py)."""
        return self._like(geometry=geometry)

    def with_static(self, shape: MultimodalShape) -> "MultimodalPackedCollator":
        return self._like(static=shape)

    def rows_of(self, examples: list[dict]) -> list[list[int]]:
        lengths = [len(e["input_ids"]) for e in examples]
        return [list(range(len(examples)))] if self.varlen else pack_into_rows(lengths, self.row_len)

    # --- static shapes ----------------------------------------------------------------------------------
    def static_media_blocker(self, examples: list[dict]) -> str | None:
        """Why the media of these examples cannot be padded to one shape, or None."""
        if any(e.get("videos") for e in examples):
            return "rows with videos (their frames are not padded to a static layout)"
        if any(e.get("image_grid_thw") for e in examples) and self.geometry is None:
            return "the vision tower's layout is not worked out with the batch (training/vision_speed.py)"
        return None

    def static_shape_for(self, examples: list[dict], groups: list[list[int]]) -> MultimodalShape:
        """The smallest MultimodalShape that holds every group (micro-batch) of `examples`."""
        lengths = [len(e["input_ids"]) for e in examples]
        targets = [targets_of(e) for e in examples]
        text = static_shape_for(groups, lengths, targets, self.attention, self.row_len)
        if self.geometry is not None:
            batches = [[g for i in group for g in _grids(examples[i])] for group in groups]
            vision = shape_for(self.geometry, batches)
            real = sum(patches_of(b) for b in batches)
            return MultimodalShape(text, vision=vision, media_fill=real / max(vision.patches * len(groups), 1))
        rows = [sum(_pixel_rows(examples[i]) for i in group) for group in groups]
        images = max(rows)
        return MultimodalShape(text, images=images, media_fill=sum(rows) / max(images * len(groups), 1))

    def _media_fits(self, examples: list[dict]) -> bool:
        shape = self.static
        if self.static_media_blocker(examples) is not None:
            return False
        if shape.vision is not None:
            return fits(self.geometry, [g for e in examples for g in _grids(e)], shape.vision)
        return sum(_pixel_rows(e) for e in examples) <= shape.images

    # --- a batch --------------------------------------------------------------------------------------------
    def __call__(self, examples: list[dict]) -> dict:
        media_fits = self.static is not None and self._media_fits(examples)
        text = PackedCollator(self.pad_token_id, self.row_len, self.attention, segment_ids=True,
                              static=self.static.text if media_fits else None)
        batch = text(examples)
        static = bool(batch.pop("static", False))
        segments = batch["segment_ids"] if self.segment_ids else batch.pop("segment_ids")
        order = list(dict.fromkeys(int(i) for i in segments.flatten().tolist() if i >= 0))
        self._place_per_token(batch, examples, segments)
        ordered = [examples[i] for i in order]
        media = batch_media(ordered, self.ctx)
        if self.geometry is not None and "pixel_values" in media and "pixel_values_videos" not in media:
            grids = [g for e in ordered for g in _grids(e)]
            if static:
                layout, padding = static_layout(self.geometry, grids, self.static.vision)
                media["pixel_values"] = _pad_rows(media["pixel_values"], padding)
            else:
                layout = vision_layout(self.geometry, grids)
            media.pop("image_grid_thw", None)   # the layout says everything the tower reads from it
            media.update(layout)
        elif static and self.static.vision is None:
            media["pixel_values"] = _pad_rows(media.get("pixel_values"), self.static.images)
        batch.update(media)
        if self.static is not None:
            batch["static"] = static
        return batch

    def _place_per_token(self, batch: dict, examples: list[dict], segments: torch.Tensor) -> None:
        """Qwen-VL's 4-row positions and the token-type ids, each example's at the positions it landed on."""
        plain = batch["position_ids"]
        types = {key: torch.zeros_like(plain) for key in TYPE_KEYS if all(key in e for e in examples)}
        mrope = plain.unsqueeze(0).repeat(3, 1, 1) if self.rope is not None else None   # padding: plain positions
        for i, example in enumerate(examples):
            where = segments == i
            if mrope is not None:
                mrope[:, where] = self.rope(example)
            for key, tensor in types.items():
                tensor[where] = torch.as_tensor(example[key], dtype=torch.long)
        batch.update(types)
        if mrope is not None:
            batch["position_ids"] = torch.cat([plain.unsqueeze(0), mrope], dim=0)


def _pad_rows(pixels: torch.Tensor | None, rows: int) -> torch.Tensor | None:
    """Pixels with `rows` blank rows added (a Qwen-VL tower's patches), or, for a fixed-size tower (4-D pixels), up
    to `rows` images."""
    if pixels is None:
        return None
    if pixels.dim() == 4:   # [images, channels, height, width]
        rows = rows - len(pixels)
    if rows <= 0:
        return pixels
    return torch.cat([pixels, pixels.new_zeros((rows, *pixels.shape[1:]))])
