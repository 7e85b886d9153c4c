"""The LoRA pair of a projection with an adapter per row (lora_bank.py), y += scale[i] * B[i] (A[i] x), in one kernel.

One program per (row, block of the output width). It first computes the row's whole rank-r product t = A[i] x in fp32
(every program of the row computes the same t: r x in multiply-adds, a few microseconds of arithmetic against a
kernel launch saved), then adds scale * B t to its block of the base output, in place. The first version ran a shrink
and an expand kernel per projection: 336 launches in a 24-layer step at about 2 us each, a third of the step
(torch.profiler on an H100, 2026-12-06). With the projections that share an input fused (q|k|v, gate|up: runner.py),
a layer's LoRA is four launches.

No atomics: the same inputs give the same bits on every run, so a recorded step equals the eager step (atomic adds
summed in arrival order, and a random-weight model amplified those last-bit differences past the recorded step's
check: issue 62). A row of index 0 (no adapter) returns at once. The scale is per adapter and output column (a
fused bank's members may scale differently), B is block-diagonal in a fused bank (its zeros add exactly nothing).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 256
BLOCK_N = 128


@triton.jit
def _lora_kernel(X, A, B, Scale, Index, Y, stride_x, stride_ae, stride_ar, stride_be, stride_bn, stride_se, stride_sn,
                 stride_y,
                 K, N, R: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.program_id(0)
    adapter = tl.load(Index + r).to(tl.int64)
    if adapter != 0:
        ranks = tl.arange(0, BLOCK_R)
        t = tl.zeros([BLOCK_R], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(X + r * stride_x + k, mask=k < K, other=0.0).to(tl.float32)
            a = tl.load(A + adapter * stride_ae + ranks[:, None] * stride_ar + k[None, :],
                        mask=(ranks[:, None] < R) & (k[None, :] < K), other=0.0).to(tl.float32)
            t += tl.sum(a * x[None, :], axis=1)
        n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
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
    _lora_kernel[(rows, triton.cdiv(out, BLOCK_N))](
        x, A, B, scale, index, y, x.stride(0), A.stride(0), A.stride(1), B.stride(0), B.stride(1),
        scale.stride(0), scale.stride(1) if scale.dim() == 2 else 0, y.stride(0), width, out,
        R=rank, BLOCK_R=max(2, triton.next_power_of_2(rank)), BLOCK_K=BLOCK_K, BLOCK_N=BLOCK_N)
    return y
