"""Joining and trimming transformers' DynamicCache along the batch, so requests can enter and leave a running
batch between decode steps.

Every row of the batch is left-padded to one common length L (what `generate` does with a padded batch), so a
cache is just tensors [batch, heads, L, head_dim] per layer plus the padding mask the caller keeps. Joining two
caches pads the shorter on the left and concatenates rows; trimming drops leading columns that are padding in
every row (after the longest row left), so L stays the longest live sequence instead of growing for ever.

Sliding-window layers (Gemma 3) keep only their last `sliding_window - 1` positions and count every position
seen in `cumulative_length`; the same padding arithmetic holds on that window. Any other layer kind (static,
quantised, offloaded, linear attention) is not joined: `can_join` says so and the engine then admits new requests
only when the batch is empty.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import (DynamicCache, DynamicLayer, DynamicSlidingWindowLayer,
                                      LinearAttentionCacheLayerMixin)


def _is_sliding(layer) -> bool:
    return type(layer) is DynamicSlidingWindowLayer


def can_join(cache: DynamicCache) -> bool:
    """Whether every layer is a plain dynamic layer (full or sliding window) whose tensors this module knows."""
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            continue
        if _is_sliding(layer) and hasattr(layer, "cumulative_length") and hasattr(layer, "sliding_window"):
            continue
        return False
    return not getattr(cache, "offloading", False)


def _stored(total: int, layer) -> int:
    """Positions a layer holds for a padded length `total`: all of them, or the last sliding_window - 1."""
    return min(total, layer.sliding_window - 1) if _is_sliding(layer) else total


def _pad_left(t: torch.Tensor, width: int) -> torch.Tensor:
    if width == 0:
        return t
    pad = t.new_zeros(t.shape[0], t.shape[1], width, t.shape[3])
    return torch.cat([pad, t], dim=-2)


def join(running: DynamicCache, running_len: int, new: DynamicCache, new_len: int) -> int:
    """Append the rows of `new` (padded length new_len) below those of `running` (running_len), in place on
    `running`; returns the joined padded length."""
    total = max(running_len, new_len)
    for a, b in zip(running.layers, new.layers):
        if not a.is_initialized or not b.is_initialized:
            raise ValueError("cannot join a cache layer that holds no states")
        keep = _stored(total, a)
        a.keys = torch.cat([_pad_left(a.keys, keep - a.keys.shape[-2]), _pad_left(b.keys, keep - b.keys.shape[-2])])
        a.values = torch.cat([_pad_left(a.values, keep - a.values.shape[-2]),
                              _pad_left(b.values, keep - b.values.shape[-2])])
        if _is_sliding(a):
            a.cumulative_length = total
    return total


def _holds_positions(layer) -> bool:
    """Whether a layer keeps keys and values per position; a linear-attention layer (Qwen3.5, Qwen3-Next) keeps only
    a conv window and a recurrent state per row, with nothing to pad, join or trim along positions."""
    return not isinstance(layer, LinearAttentionCacheLayerMixin) or isinstance(layer, DynamicLayer)


def select_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep only `rows` (a LongTensor of row indices) in every layer: keys and values, and a linear-attention layer's
    conv window and recurrent state of each row."""
    for layer in cache.layers:
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            LinearAttentionCacheLayerMixin.reorder_cache(layer, rows)   # its states only, per row
        if _holds_positions(layer) and layer.is_initialized:
            layer.keys = layer.keys[rows]
            layer.values = layer.values[rows]


def trim_left(cache: DynamicCache, columns: int, total: int) -> int:
    """Drop the first `columns` positions (padding in every row) of a cache of padded length `total`."""
    if columns <= 0:
        return total
    remaining = total - columns
    for layer in cache.layers:
        if not _holds_positions(layer):
            continue
        keep = _stored(remaining, layer)
        layer.keys = layer.keys[..., layer.keys.shape[-2] - keep:, :]
        layer.values = layer.values[..., layer.values.shape[-2] - keep:, :]
        if _is_sliding(layer):
            layer.cumulative_length = remaining
    return remaining
