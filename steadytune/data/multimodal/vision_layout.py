"""Where a Qwen-VL vision tower's patches go, worked out on the CPU with the batch, and padded to a static shape.

A Qwen-VL tower (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5) takes every image of a batch as one sequence of patches
and derives from the images' grids (`image_grid_thw`) its rotary positions, where each image (and, Qwen2.5-VL, each
window) starts, the window order and (Qwen3-VL) how its learned position table is resampled. Derived inside its
forward, these read the grid back from the GPU (`tolist()`, `.item()`: a sync each, half a dozen a micro-batch).
transformers' vision_utils computes each of them from the grid alone and the towers take them precomputed, as
keyword arguments (`position_ids`, `cu_seqlens`, ...); here they are computed with the batch, from the grids the
collator has on the CPU anyway, by transformers' own functions (so the values are the tower's).

Static shapes (VisionShape): every micro-batch's patches padded to one count with blank "padding images" after the
real ones (each at most as large as the largest real image, 2 patches high), their cu_seqlens then filled up with
empty sequences. A padding image attends only to itself (cu_seqlens keeps images apart, windows lie inside an image)
and every other operation of the tower is per patch or per 2x2 group, so the real images' features are the same as
unpadded; the padding images' features come after the real ones and no token reads them (model/media_features.py).
The tower then sees one shape per run and can be replayed from a CUDA graph with the language model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch

# The keys a batch carries the layout under (the tower's own keyword, prefixed so that nothing else reads them).
LAYOUT_PREFIX = "vision_"


@dataclass(frozen=True)
class VisionGeometry:
    """What a tower's layout depends on, read from the tower (training/vision_data.geometry_of)."""
    merge_size: int
    patch_size: int
    window_size: int | None = None           # Qwen2.5-VL: windowed attention, in pixels
    position_grid: int | None = None         # Qwen3-VL: side of its learned position table
    interpolation_mode: str = "bilinear"     # Qwen3-VL: how that table is resampled
    align_corners: bool = True


@dataclass(frozen=True)
class VisionShape:
    """One layout size for every micro-batch of a run: `patches` rows of pixels, `segments` images (real, padding,
    then empty), `windows` windows (Qwen2.5-VL), no image longer than `max_seqlen` patches."""
    patches: int
    segments: int
    windows: int
    max_seqlen: int

    def describe(self) -> str:
        return (f"{self.patches:,} patches in {self.segments} images"
                + (f" and {self.windows} windows" if self.windows else ""))


def _vision_utils():
    # transformers >= 5.17: the towers take these precomputed (older versions: no layout, the tower derives them)
    try:
        from transformers import vision_utils
    except ImportError:
        return None
    return vision_utils


def layouts_supported() -> bool:
    return _vision_utils() is not None


def patches_of(grids: Sequence[Sequence[int]]) -> int:
    return sum(int(t) * int(h) * int(w) for t, h, w in grids)


def padding_grids(patches: int, largest: int) -> list[list[int]]:
    """Grids of blank images holding `patches` patches (a multiple of 4), each 2 patches high and at most `largest`
    patches: the padding of a static layout."""
    grids, left = [], patches
    piece = max(4, largest - largest % 4)
    while left > 0:
        n = min(piece, left)
        grids.append([1, 2, n // 2])
        left -= n
    return grids


def vision_layout(geometry: VisionGeometry, grids: Sequence[Sequence[int]]) -> dict:
    """The tower's precomputed inputs for images of `grids` (in batch order), under LAYOUT_PREFIX keys."""
    utils = _vision_utils()
    grid = torch.tensor([[int(x) for x in g] for g in grids], dtype=torch.long)
    layout = {"position_ids": utils.get_vision_position_ids(grid, geometry.merge_size),
              "cu_seqlens": utils.get_vision_cu_seqlens(grid)}
    layout["max_seqlen"] = max(int(h) * int(w) for _, h, w in grids)
    if geometry.window_size:
        window_index, cu_windows = utils.get_vision_window_index(grid, geometry.merge_size, geometry.window_size,
                                                                 geometry.patch_size)
        layout.update(window_index=window_index, cu_window_seqlens=cu_windows,
                      max_window_seqlen=int((cu_windows[1:] - cu_windows[:-1]).max()))
    if geometry.position_grid:
        indices, weights = utils.get_vision_interpolation_indices_and_weights(
            grid, geometry.position_grid, mode=geometry.interpolation_mode, align_corners=geometry.align_corners,
            spatial_merge_size=geometry.merge_size)
        layout.update(interp_indices=indices, interp_weights=weights)
    return {LAYOUT_PREFIX + k: v for k, v in layout.items()}


def _fill(bounds: torch.Tensor, entries: int) -> torch.Tensor:
    """cu_seqlens with empty sequences appended up to `entries` values."""
    if len(bounds) > entries:
        raise ValueError(f"{len(bounds) - 1} sequences do not fit a static layout of {entries - 1}")
    return torch.cat([bounds, bounds[-1:].expand(entries - len(bounds))])


def static_layout(geometry: VisionGeometry, grids: Sequence[Sequence[int]], shape: VisionShape) -> tuple[dict, int]:
    """(the layout of `grids` padded to `shape`, patches of padding added to the pixels)."""
    padding = shape.patches - patches_of(grids)
    layout = vision_layout(geometry, [*grids, *padding_grids(padding, shape.max_seqlen)])
    key = LAYOUT_PREFIX
    layout[key + "cu_seqlens"] = _fill(layout[key + "cu_seqlens"], shape.segments + 1)
    layout[key + "max_seqlen"] = shape.max_seqlen
    if geometry.window_size:
        layout[key + "cu_window_seqlens"] = _fill(layout[key + "cu_window_seqlens"], shape.windows + 1)
        # a window is at most window_size / patch_size patches a side: one bound for every batch (a kernel's
        # max_seqlen only has to hold the longest; a recorded graph keeps the value it was recorded with)
        layout[key + "max_window_seqlen"] = (geometry.window_size // geometry.patch_size) ** 2
    return layout, padding


def fits(geometry: VisionGeometry, grids: Sequence[Sequence[int]], shape: VisionShape) -> bool:
    """Whether images of `grids` fit `shape` (all patches, images and windows, padding included)."""
    padding = shape.patches - patches_of(grids)
    if padding < 0 or any(int(h) * int(w) > shape.max_seqlen for _, h, w in grids):
        return False
    padded = [*grids, *padding_grids(padding, shape.max_seqlen)]
    return sum(int(t) for t, _, _ in padded) <= shape.segments and windows_of(geometry, padded) <= shape.windows


def windows_of(geometry: VisionGeometry, grids: Sequence[Sequence[int]]) -> int:
    """How many windows images of `grids` make (each image's own: a window never spans two), counted once per grid
    size (a run's static shape counts them for every micro-batch of its epochs)."""
    if not geometry.window_size:
        return 0
    return sum(_windows_of_image(geometry, tuple(int(x) for x in g)) for g in grids)


@functools.lru_cache(maxsize=4096)
def _windows_of_image(geometry: VisionGeometry, grid: tuple[int, int, int]) -> int:
    return len(vision_layout(geometry, [grid])[LAYOUT_PREFIX + "cu_window_seqlens"]) - 1


def shape_for(geometry: VisionGeometry, batches: Sequence[Sequence[Sequence[int]]], multiple: int = 64) -> VisionShape:
    """The smallest VisionShape that holds every batch of grids (patches rounded up to `multiple`, a multiple of
    4), counting the padding images each batch would get."""
    patches = max(patches_of(g) for g in batches)
    patches = -(-patches // multiple) * multiple
    largest = max((int(h) * int(w) for g in batches for _, h, w in g), default=4)
    segments = windows = 0
    for grids in batches:
        padded = [*grids, *padding_grids(patches - patches_of(grids), largest)]
        segments = max(segments, sum(int(t) for t, _, _ in padded))
        windows = max(windows, windows_of(geometry, padded))
    return VisionShape(patches, segments, windows, largest)
