"""The grouped matmul as Triton kernels, forward and backward (grouped.py says when it runs: ROCm by default, where
torch's own falls back to a slow path, and wherever `moe_grouped_mm: triton` asks for it).

Rows come sorted by group (expert); group g owns rows [offsets[g-1], offsets[g]). Each program computes one
BLOCK_M x BLOCK_N tile of one group's output, so no tile mixes two experts' rows. How many tiles a group has depends
on its row count, which lives on the device: the tile -> (group, first row) map is built there with torch ops
(cumsum, searchsorted) over an upper bound of tiles, ceil(rows / BLOCK_M) + groups; the programs past the real tiles
return at once. Nothing is read back to the host, so the kernel can sit in a CUDA graph and under torch.compile (as a
custom op it traces whole).

Backward: the input gradient is the same kernel over the transposed weights (dY @ w[g]^T); the weight gradient of a
trainable w (the experts' LoRA factors) is a second kernel, one program per (group, K block, N block), summing
x[rows of g]^T @ dY[rows of g] over the group's rows in fp32. The base experts are frozen: their weight gradient is
never computed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from steadytune.model.kernel_catalogue import device_arch, dtype_name, grouped_blocks


@triton.jit
def _grouped_mm_kernel(x_ptr, w_ptr, y_ptr, ends_ptr, tile_group_ptr, tile_row_ptr, K, N,
                       stride_xm, stride_xk, stride_wg, stride_wk, stride_wn, stride_ym, stride_yn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tile = tl.program_id(0)
    group = tl.load(tile_group_ptr + tile)
    if group >= 0:
        first = tl.load(tile_row_ptr + tile)
        end = tl.load(ends_ptr + group)
        rows = first + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < end
        col_ok = cols < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        w_group = w_ptr + group.to(tl.int64) * stride_wg
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            a = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :] * stride_xk,
                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w_group + ks[:, None] * stride_wk + cols[None, :] * stride_wn,
                        mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            acc += tl.dot(a, b)
        tl.store(y_ptr + rows[:, None].to(tl.int64) * stride_ym + cols[None, :] * stride_yn,
                 acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _grouped_weight_grad_kernel(x_ptr, dy_ptr, dw_ptr, ends_ptr, K, N,
                                stride_xm, stride_xk, stride_dym, stride_dyn, stride_dwg, stride_dwk, stride_dwn,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    group = tl.program_id(0)
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    cols = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    start = tl.load(ends_ptr + group - 1, mask=group > 0, other=0)
    end = tl.load(ends_ptr + group)
    k_ok = ks < K
    col_ok = cols < N
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for m0 in range(start, end, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        row_ok = rows < end
        xt = tl.load(x_ptr + rows[None, :].to(tl.int64) * stride_xm + ks[:, None] * stride_xk,
                     mask=k_ok[:, None] & row_ok[None, :], other=0.0)
        g = tl.load(dy_ptr + rows[:, None].to(tl.int64) * stride_dym + cols[None, :] * stride_dyn,
                    mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(xt, g)
    tl.store(dw_ptr + group.to(tl.int64) * stride_dwg + ks[:, None] * stride_dwk + cols[None, :] * stride_dwn,
             acc.to(dw_ptr.dtype.element_ty), mask=k_ok[:, None] & col_ok[None, :])


def tile_map(ends: torch.Tensor, rows: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (group of each tile, or -1 past the real tiles; first row of each tile), over the upper bound of tiles,
    built on the device."""
    groups = ends.numel()
    ends64 = ends.to(torch.int64)
    starts = torch.cat([ends64.new_zeros(1), ends64[:-1]])
    tiles = (ends64 - starts + block_m - 1) // block_m
    tile_ends = torch.cumsum(tiles, 0)
    bound = triton.cdiv(rows, block_m) + groups
    ids = torch.arange(bound, device=ends.device)
    group = torch.searchsorted(tile_ends, ids, right=True)
    valid = group < groups
    safe = group.clamp(max=groups - 1)
    first = starts[safe] + (ids - (tile_ends - tiles)[safe]) * block_m
    return torch.where(valid, safe, -1).to(torch.int32), first.to(torch.int32)


def _forward(x: torch.Tensor, w: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    rows, k = x.shape
    n = w.shape[-1]
    y = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    if rows == 0:
        return y
    block_m, block_n, block_k, warps = grouped_blocks(k, n, dtype_name(x.dtype), device_arch(x.device))
    group, first = tile_map(ends, rows, block_m)
    grid = (group.numel(), triton.cdiv(n, block_n))
    _grouped_mm_kernel[grid](x, w, y, ends, group, first, k, n, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                             w.stride(2), y.stride(0), y.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                             num_warps=warps)
    return y


def _weight_grad(x: torch.Tensor, dy: torch.Tensor, ends: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    k, n = x.shape[1], dy.shape[1]
    dw = torch.empty(ends.numel(), k, n, dtype=dtype, device=x.device)
    block_m, block_n, block_k, warps = grouped_blocks(k, n, dtype_name(x.dtype), device_arch(x.device))
    grid = (ends.numel(), triton.cdiv(k, block_k), triton.cdiv(n, block_n))
    _grouped_weight_grad_kernel[grid](x, dy, dw, ends, k, n, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
                                      dw.stride(0), dw.stride(1), dw.stride(2),
                                      BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps)
    return dw


class _TritonGroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, ends):
        ctx.save_for_backward(x if w.requires_grad else None, w, ends)
        return _forward(x, w, ends)

    @staticmethod
    def backward(ctx, dy):
        x, w, ends = ctx.saved_tensors
        dy = dy.contiguous()
        dx = _forward(dy, w.transpose(-2, -1), ends) if ctx.needs_input_grad[0] else None
        dw = _weight_grad(x, dy, ends, w.dtype) if ctx.needs_input_grad[1] else None
        return dx, dw, None


def triton_grouped_mm(x: torch.Tensor, w: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """x [rows, K] sorted by group, w [groups, K, N] (any strides), ends int32 [groups] -> [rows, N]; rows at and
    past ends[-1] are not written."""
    return _TritonGroupedMM.apply(x, w, ends)
