"""The LoRA pair of a projection with an adapter per row (lora_bank.py): shrink t = x A[i]^T, then expand
y += scale[i] * t B[i]^T into the base output, in place.

Shrink: one program per (row, block of the input width), each writing its block's share of the rank-r sums to its own
slot of a partial-sum buffer [rows, blocks, r] (a 1-row step of a 4,096-wide layer is 16 programs, not 1). Expand: one
program per (row, block of the output width); it first adds the row's partial sums up in block order, then multiplies
by B. No atomics: the same inputs give the same bits on every run, so a recorded step equals the eager step exactly
(atomic adds summed in arrival order, and a random-weight model amplified those last-bit differences past the recorded
step's check: issue 62's "CUDA graphs are off" at 32 rows). A row of index 0 (no adapter) returns at once: base-model
rows cost two launches and nothing else. Sums in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 256
BLOCK_N = 128


@triton.jit
def _shrink_kernel(X, A, Index, Parts, stride_x, stride_ae, stride_ar, K, R: tl.constexpr, BLOCK_R: tl.constexpr,
                   SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    s = tl.program_id(1)
    adapter = tl.load(Index + r)
    if adapter != 0:
        k = s * BLOCK + tl.arange(0, BLOCK)
        ranks = tl.arange(0, BLOCK_R)
        x = tl.load(X + r * stride_x + k, mask=k < K, other=0.0).to(tl.float32)
        a = tl.load(A + adapter.to(tl.int64) * stride_ae + ranks[:, None] * stride_ar + k[None, :],
                    mask=(ranks[:, None] < R) & (k[None, :] < K), other=0.0).to(tl.float32)
        tl.store(Parts + (r * SPLITS + s) * R + ranks, tl.sum(a * x[None, :], axis=1), mask=ranks < R)


@triton.jit
def _expand_kernel(Parts, B, Scale, Index, Y, stride_y, stride_be, stride_bn, N, R: tl.constexpr,
                   BLOCK_R: tl.constexpr, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    adapter = tl.load(Index + r)
    if adapter != 0:
        n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ranks = tl.arange(0, BLOCK_R)
        splits = tl.arange(0, BLOCK_S)
        parts = tl.load(Parts + (r * SPLITS + splits[:, None]) * R + ranks[None, :],
                        mask=(splits[:, None] < SPLITS) & (ranks[None, :] < R), other=0.0)
        t = tl.sum(parts, axis=0)
        b = tl.load(B + adapter.to(tl.int64) * stride_be + n[:, None] * stride_bn + ranks[None, :],
                    mask=(n[:, None] < N) & (ranks[None, :] < R), other=0.0).to(tl.float32)
        delta = tl.sum(b * t[None, :], axis=1) * tl.load(Scale + adapter)
        y = tl.load(Y + r * stride_y + n, mask=n < N, other=0.0).to(tl.float32)
        tl.store(Y + r * stride_y + n, (y + delta).to(Y.dtype.element_ty), mask=n < N)


def bgmv(x: torch.Tensor, y: torch.Tensor, A: torch.Tensor, B: torch.Tensor, scale: torch.Tensor,
         index: torch.Tensor) -> torch.Tensor:
    """x [rows, in], y [rows, out] (the base output, updated in place and returned); A [adapters, r, in],
    B [adapters, out, r], scale [adapters] (float32), index [rows]."""
    rows, width = x.shape
    rank, out = A.shape[1], B.shape[1]
    x = x.contiguous()
    if y.stride(-1) != 1:
        y = y.contiguous()
    splits = triton.cdiv(width, BLOCK_K)
    parts = torch.empty(rows, splits, rank, dtype=torch.float32, device=x.device)
    block_r = max(2, triton.next_power_of_2(rank))
    _shrink_kernel[(rows, splits)](x, A, index, parts, x.stride(0), A.stride(0), A.stride(1), width,
                                   R=rank, BLOCK_R=block_r, SPLITS=splits, BLOCK=BLOCK_K)
    _expand_kernel[(rows, triton.cdiv(out, BLOCK_N))](parts, B, scale, index, y, y.stride(0), B.stride(0), B.stride(1),
                                                      out, R=rank, BLOCK_R=block_r, SPLITS=splits,
                                                      BLOCK_S=max(2, triton.next_power_of_2(splits)), BLOCK=BLOCK_N)
    return y
