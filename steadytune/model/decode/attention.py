"""Attention of one new token per row over that row's own columns of the slot cache, never over a mask of the whole
batch's width.

Row r's new key sits at column lengths[r] (written just before); it attends to columns 0..lengths[r], or on a sliding
layer to those after lengths[r] - window. Two implementations behind one call (`decode_attention`, `impl`):
- "split" (a GPU with Triton: kernels/attention_triton.py): flash-decoding. Each (row, kv head, split of the columns)
  is a program that reads only the columns its row has, all of the kv head's query heads at once (GQA: the keys are
  read once for the group); a second kernel merges the splits by their log-sum-exp. A short row costs what it reads,
  whatever the longest row in the batch is.
- "sdpa" (the CPU, and where Triton is absent): torch's scaled_dot_product_attention over the first `columns`
  columns (the longest row's, or the recorded step's bucket) with a mask built from the lengths.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def visible_columns(lengths: torch.Tensor, columns: int, window: Optional[int]) -> torch.Tensor:
    """[rows, 1, 1, columns] bool: the columns each row's new token attends to."""
    position = lengths.view(-1, 1)
    index = torch.arange(columns, device=lengths.device).view(1, -1)
    seen = index <= position
    if window is not None:
        seen &= index > position - window
    return seen[:, None, None, :]


def sdpa_decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                          columns: int, window: Optional[int], scaling: float) -> torch.Tensor:
    """q [rows, heads, dim]; keys, values [slots, kv heads, capacity, dim] -> [rows, heads * dim]."""
    rows, heads, dim = q.shape
    k, v = keys[:rows, :, :columns], values[:rows, :, :columns]
    out = F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=visible_columns(lengths, columns, window),
                                         scale=scaling, enable_gqa=heads != k.shape[1])
    return out.reshape(rows, heads * dim)


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                     columns: int, window: Optional[int], scaling: float, impl: str) -> torch.Tensor:
    if impl == "split":
        from steadytune.model.decode.kernels.attention_triton import split_decode_attention  # lazy: Triton
        return split_decode_attention(q, keys, values, lengths, columns, window, scaling)
    return sdpa_decode_attention(q, keys, values, lengths, columns, window, scaling)
