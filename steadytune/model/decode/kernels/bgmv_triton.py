"""The LoRA pair of a projection with an adapter per row (lora_bank.py): shrink t = A[i] x, then expand
y += scale[i] * B[i] t into the base output, in place.

Shrink: one program per (row, block of the input width), each writing its block's share of the rank-r sums to its own
slot of a partial-sum buffer [rows, blocks, r] (a 1-row step of a 4,096-wide layer is 16 programs, not 1). Expand: one
program per (row, block of the output width); it first adds the row's partial sums up in block order, then multiplies
by B. With the projections that share an input fused (q|k|v, gate|up: runner.py), a layer's LoRA is 8 launches.

Measured on an H100 (the 0.5B shape, 2026-12-06): the first version's shrink and expand took 1.9 and 2.3 us a launch
(atomic adds into t); one kernel doing both, each program computing the whole rank-r product over the input width
itself, took about 12 us a launch (a serial loop over the width in every program), so the pair stays two kernels.

No atomics: the same inputs give the same bits on every run, so a recorded step equals the eager step (atomic adds
summed in arrival order, and a random-weight model amplified those last-bit differences past the recorded step's
check: issue 62). A row of index 0 (no adapter) returns at once. The scale is per adapter and output column (a fused
bank's members may scale differently); B is block-diagonal in a fused bank (its zeros add exactly nothing).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from steadytune.model.kernel_catalogue import (BGMV_BLOCK_K, BGMV_BLOCK_N, bgmv_blocks, bgmv_rank_block, bgmv_warps,
                                               device_arch)


@triton.jit
def _shrink_kernel(X, A, Index, Parts, stride_x, stride_ae, stride_ar, K, R: tl.constexpr, BLOCK_R: tl.constexpr,
                   SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    s = tl.program_id(1)
    adapter = tl.load(Index + r).to(tl.int64)
    if adapter != 0:
        k = s * BLOCK + tl.arange(0, BLOCK)
        ranks = tl.arange(0, BLOCK_R)
        x = tl.load(X + r * stride_x + k, mask=k < K, other=0.0).to(tl.float32)
        a = tl.load(A + adapter * stride_ae + ranks[:, None] * stride_ar + k[None, :],
                    mask=(ranks[:, None] < R) & (k[None, :] < K), other=0.0).to(tl.float32)
        tl.store(Parts + (r * SPLITS + s) * R + ranks, tl.sum(a * x[None, :], axis=1), mask=ranks < R)


@triton.jit
def _expand_kernel(Parts, B, Scale, Index, Y, stride_be, stride_bn, stride_se, stride_sn, stride_y, N,
                   R: tl.constexpr, BLOCK_R: tl.constexpr, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
                   BLOCK: tl.constexpr):
    r = tl.program_id(0)
    adapter = tl.load(Index + r).to(tl.int64)
    if adapter != 0:
        n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ranks = tl.arange(0, BLOCK_R)
        splits = tl.arange(0, BLOCK_S)
        parts = tl.load(Parts + (r * SPLITS + splits[:, None]) * R + ranks[None, :],
                        mask=(splits[:, None] < SPLITS) & (ranks[None, :] < R), other=0.0)
        t = tl.sum(parts, axis=0)
        b = tl.load(B + adapter * stride_be + n[:, None] * stride_bn + ranks[None, :],
                    mask=(n[:, None] < N) & (ranks[None, :] < R), other=0.0).to(tl.float32)
        scale = tl.load(Scale + adapter * stride_se + n * stride_sn, mask=n < N, other=0.0)
        delta = tl.sum(b * t[None, :], axis=1) * scale
        y = tl.load(Y + r * stride_y + n, mask=n < N, other=0.0).to(tl.float32)
        tl.store(Y + r * stride_y + n, (y + delta).to(Y.dtype.element_ty), mask=n < N)


def bgmv(x: torch.Tensor, y: torch.Tensor, A: torch.Tensor, B: torch.Tensor, scale: torch.Tensor,
         index: torch.Tensor) -> torch.Tensor:
    """x [rows, in], y [rows, out] (the base output, updated in place and returned); A [adapters, r, in],
    B [adapters, out, r], scale [adapters] or [adapters, out] (float32), index [rows]."""
    rows, width = x.shape
    rank, out = A.shape[1], B.shape[1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    if y.stride(-1) != 1:
        y = y.contiguous()
    arch, block_r = device_arch(x.device), bgmv_rank_block(rank)
    splits, block_s = bgmv_blocks(width)
    parts = torch.empty(rows, splits, rank, dtype=torch.float32, device=x.device)
    _shrink_kernel[(rows, splits)](x, A, index, parts, x.stride(0), A.stride(0), A.stride(1), width,
                                   R=rank, BLOCK_R=block_r, SPLITS=splits, BLOCK=BGMV_BLOCK_K,
                                   num_warps=bgmv_warps(block_r, BGMV_BLOCK_K, arch))
    _expand_kernel[(rows, triton.cdiv(out, BGMV_BLOCK_N))](
        parts, B, scale, index, y, B.stride(0), B.stride(1), scale.stride(0),
        scale.stride(1) if scale.dim() == 2 else 0, y.stride(0), out, R=rank, BLOCK_R=block_r, SPLITS=splits,
        BLOCK_S=block_s, BLOCK=BGMV_BLOCK_N, num_warps=bgmv_warps(block_r, max(block_s, BGMV_BLOCK_N), arch))
    return y
