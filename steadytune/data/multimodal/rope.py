"""Qwen-VL's 3-D rope positions of one example, computed as transformers' `get_rope_index` (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL) computes them for an unpadded row, from the example's mm_token_type_ids and grid sizes, without the
model: the collators call it per example, so a packed row's positions are each example's own, concatenated
(tests/test_multimodal_data.py holds it to the model's get_rope_index).

Text runs count up by one on all three axes; an image block of (t, h, w) patches (h and w merged by merge_size)
takes time t0 (+ the frame's step for videos), height t0 + row, width t0 + column, where t0 is the position after the
text before it; the text after it resumes at t0 + max(h, w) / merge_size. Videos: Qwen2.5-VL spaces frames by
tokens_per_second x seconds per temporal patch; Qwen3-VL writes every frame as its own block (timestamps between), so
each frame is a block of t = 1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from steadytune.data.multimodal.plugins import IMAGE_TYPE, TEXT_TYPE, VIDEO_TYPE

QWEN_VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")


@dataclass(frozen=True)
class MRope:
    """The facts of one model's 3-D rope (from its config: `mrope_for_config`)."""
    merge_size: int = 2
    tokens_per_second: float | None = None   # Qwen2.5-VL: frames spaced in time
    frames_as_blocks: bool = False            # Qwen3-VL

    def __call__(self, example: dict) -> torch.Tensor:
        """LongTensor [3, len(input_ids)] of the example's positions."""
        return self.positions(example["mm_token_type_ids"], example.get("image_grid_thw") or [],
                              example.get("video_grid_thw") or [], example.get("second_per_grid_ts"))

    def positions(self, types: Sequence[int], image_grid: Sequence, video_grid: Sequence,
                  second_per_grid_ts: Sequence[float] | None = None) -> torch.Tensor:
        grids = {IMAGE_TYPE: iter([list(map(int, g)) for g in image_grid]), VIDEO_TYPE: iter(self._video_blocks(video_grid))}
        seconds = iter(second_per_grid_ts if second_per_grid_ts is not None else [])
        parts = []
        current = 0
        for kind, group in itertools.groupby(types):
            n = len(list(group))
            if kind == TEXT_TYPE:
                parts.append(torch.arange(current, current + n).view(1, -1).expand(3, -1))
                current += n
                continue
            block_tokens = 0
            while block_tokens < n:   # consecutive blocks of one kind (two images side by side) share a run
                t, h, w = next(grids[kind])
                interval = 1.0
                if kind == VIDEO_TYPE and self.tokens_per_second is not None:
                    interval = self.tokens_per_second * float(next(seconds, 1.0))
                parts.append(self._block(current, t, h // self.merge_size, w // self.merge_size, interval))
                block_tokens += t * (h // self.merge_size) * (w // self.merge_size)
                current += max(h, w) // self.merge_size
        if not parts:
            return torch.zeros((3, 0), dtype=torch.long)
        return torch.cat(parts, dim=1).long()

    def _video_blocks(self, video_grid: Sequence) -> list[list[int]]:
        grids = [list(map(int, g)) for g in video_grid]
        if not self.frames_as_blocks:
            return grids
        return [[1, h, w] for t, h, w in grids for _ in range(t)]

    @staticmethod
    def _block(start: int, t: int, h: int, w: int, interval: float) -> torch.Tensor:
        temporal = (torch.arange(t) * interval).long()
        tt, hh, ww = torch.meshgrid(temporal, torch.arange(h) + start, torch.arange(w) + start, indexing="ij")
        block = torch.stack([tt, hh, ww]).reshape(3, -1)
        block[0] += start
        return block


def mrope_for_config(config: Any) -> MRope | None:
    """The MRope of a model config (a transformers config or its dict); None for a model without 3-D rope."""
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    model_type = get("model_type", "")
    if model_type not in QWEN_VL_MODEL_TYPES:
        return None
    vision = get("vision_config") or {}
    vget = vision.get if isinstance(vision, dict) else lambda k, d=None: getattr(vision, k, d)
    tokens_per_second = vget("tokens_per_second") if model_type == "qwen2_5_vl" else None
    return MRope(int(vget("spatial_merge_size", 2) or 2), tokens_per_second, model_type.startswith("qwen3"))


def text_positions(length: int) -> torch.Tensor:
    """The plain 1-D positions transformers reads from row 0 of Qwen-VL's 4-row position ids (where packed examples
    start: a restart at 0)."""
    return torch.arange(length)
