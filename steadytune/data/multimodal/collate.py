"""Batches of multimodal features: the text padded (data/collators.py's PadCollator), the token-type ids padded with
0 (text), and the pixels made now, per batch, from each example's media (LLaMA-Factory makes them in its collator too:
a dataset's pixel values would not fit in memory). Images are concatenated in example order, so the model's
"which features belong to which image tokens" walk (left to right over the batch) finds each image where its
tokens are. With `rope` (Qwen-VL), the position ids are computed per example (rope.py) and padded: 4 rows, the
plain positions then Qwen's time / height / width rows (the layout transformers reads)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from steadytune.data.collators import PadCollator
from steadytune.data.multimodal.encode import MediaContext, media_inputs
from steadytune.data.multimodal.rope import text_positions

TYPE_KEYS = ("token_type_ids", "mm_token_type_ids")
GRID_KEYS = ("image_grid_thw", "video_grid_thw")


def batch_media(examples: list[dict], ctx: MediaContext) -> dict:
    """pixel_values / image_grid_thw / pixel_values_videos / video_grid_thw (+ second_per_grid_ts) of the examples'
    media, concatenated in order; {} when no example has any."""
    parts: dict[str, list] = {}
    for example in examples:
        inputs, _ = media_inputs(example, ctx)
        inputs.pop("num_crops", None)   # pan-and-scan crops are already among the pixel values
        for key, value in inputs.items():
            parts.setdefault(key, []).append(value)
    out: dict[str, Any] = {}
    for key, values in parts.items():
        if isinstance(values[0], torch.Tensor):
            out[key] = torch.cat(values, dim=0)
        else:
            out[key] = [v for value in values for v in value]
    if "second_per_grid_ts" in out:
        out["second_per_grid_ts"] = torch.tensor(out["second_per_grid_ts"], dtype=torch.float32)
    return out


class MultimodalCollator:
    """Padded batches with pixels. `rope(example) -> LongTensor [3, length]` gives Qwen-VL's 3-D positions per
    example (rope.MRope; None: the model works them out itself from mm_token_type_ids)."""

    def __init__(self, ctx: MediaContext, pad_token_id: int, padding_side: str = "right",
                 pad_to_multiple_of: int | None = None, rope: Callable[[dict], torch.Tensor] | None = None):
        self.ctx = ctx
        self.text = PadCollator(pad_token_id, padding_side, pad_to_multiple_of)
        self.padding_side = padding_side
        self.rope = rope

    def __call__(self, examples: list[dict]) -> dict:
        return add_media(self.text(examples), examples, self.ctx, self.rope, self.padding_side)


def add_media(batch: dict, examples: list[dict], ctx: MediaContext, rope: Callable[[dict], torch.Tensor] | None,
              padding_side: str = "right") -> dict:
    """A padded text batch of `examples` (one per row) with their token-type ids, Qwen-VL's 4-row position ids (with
    `rope`) and their pixels: what MultimodalCollator and the preference stages' collator add to the text."""
    length = batch["input_ids"].shape[1]
    for key in TYPE_KEYS:
        if all(key in e for e in examples):
            batch[key] = _pad([e[key] for e in examples], length, padding_side)
    if rope is not None:
        # 4 rows, as transformers reads Qwen-VL's position ids: the plain 1-D positions, then time, height, width
        positions = torch.zeros((4, len(examples), length), dtype=torch.long)
        for row, example in enumerate(examples):
            n = len(example["input_ids"])
            cols = slice(length - n, length) if padding_side == "left" else slice(0, n)
            positions[0, row, cols] = text_positions(n)
            positions[1:, row, cols] = rope(example)
        batch["position_ids"] = positions
    batch.update(batch_media(examples, ctx))
    return batch


def _pad(rows: list, length: int, padding_side: str) -> torch.Tensor:
    """Token-type rows padded with 0 (text)."""
    out = torch.zeros((len(rows), length), dtype=torch.long)
    for i, row in enumerate(rows):
        row = torch.as_tensor(row, dtype=torch.long)
        if padding_side == "left":
            out[i, length - len(row):] = row
        else:
            out[i, :len(row)] = row
    return out
