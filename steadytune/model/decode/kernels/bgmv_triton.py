"""The LoRA pair of a projection with an adapter per row (lora_bank.py): shrink t = x A[i]^T, then expand
y += scale[i] * t B[i]^T into the base output, in place.

Shrink: one program per (row, block of the input width), each adding its share of the rank-r sums with an atomic add
(a 1-row step of a 4,096-wide layer is 16 programs, not 1). Expand: one program per (row, block of the output width).
A row of index 0 (no adapter) returns at once: base-model rows cost two launches and nothing else. Sums in fp32; t
stays fp32 between the two kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from steadytune.model.kernel_catalogue import BGMV_BLOCK_K, BGMV_BLOCK_N, bgmv_rank_block, bgmv_warps, device_arch


@triton.jit
def _shrink_kernel(X, A, Index, T, stride_x, stride_ae, stride_ar, K, R: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK: tl.constexpr):
    r = tl.program_id(0)
    adapter = tl.load(Index + r)
    if adapter != 0:
        k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ranks = tl.arange(0, BLOCK_R)
        x = tl.load(X + r * stride_x + k, mask=k < K, other=0.0).to(tl.float32)
        a = tl.load(A + adapter.to(tl.int64) * stride_ae + ranks[:, None] * stride_ar + k[None, :],
                    mask=(ranks[:, None] < R) & (k[None, :] < K), other=0.0).to(tl.float32)
        tl.atomic_add(T + r * R + ranks, tl.sum(a * x[None, :], axis=1), mask=ranks < R)


@triton.jit
def _expand_kernel(T, B, Scale, Index, Y, stride_y, stride_be, stride_bn, N, R: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    adapter = tl.load(Index + r)
    if adapter != 0:
        n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ranks = tl.arange(0, BLOCK_R)
        t = tl.load(T + r * R + ranks, mask=ranks < R, other=0.0)
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
    t = torch.zeros(rows, rank, dtype=torch.float32, device=x.device)
    block_r, arch = bgmv_rank_block(rank), device_arch(x.device)
    _shrink_kernel[(rows, triton.cdiv(width, BGMV_BLOCK_K))](
        x, A, index, t, x.stride(0), A.stride(0), A.stride(1), width, R=rank, BLOCK_R=block_r, BLOCK=BGMV_BLOCK_K,
        num_warps=bgmv_warps(block_r, BGMV_BLOCK_K, arch))
    _expand_kernel[(rows, triton.cdiv(out, BGMV_BLOCK_N))](
        t, B, scale, index, y, y.stride(0), B.stride(0), B.stride(1), out, R=rank, BLOCK_R=block_r, BLOCK=BGMV_BLOCK_N,
        num_warps=bgmv_warps(block_r, BGMV_BLOCK_N, arch))
    return y
