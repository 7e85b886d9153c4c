"""The Triton kernels of the fused LoRA SwiGLU (model/fused_swiglu.py says what they replace and why). Imported only
where they run: a GPU with Triton (a CPU install has no Triton; the reference in fused_swiglu.py serves it).

Each program takes one [BLOCK_M, BLOCK_N] tile of [tokens, intermediate width]; a grid over both keeps enough tiles
in flight to stream at the GPU's bandwidth (one program per block of whole rows measured 0.62 ms against 0.69 for
the compiled unfused step at the 1.5B width: too few programs). A row's reductions over the width are therefore
finished outside the tile: the fp8 scale's amax with an atomic max (exact in any order), and the rank-r sums as one
partial sum per column block, added up after (in a fixed order: the same bits each run). The rank-r LoRA products
are recomputed in the tile from the rank-r inputs, never written full-width: `gate = gate_base + low_g @ B_g^T` is a
[BLOCK_M, r] x [r, BLOCK_N] product on the tensor cores.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rank_tile(w_ptr, cols, col_ok, ranks, rank_ok, R):
    """The [BLOCK_R, BLOCK_N] tile of a rank-r weight stored [N, R] row-major (lora_B of gate and up)."""
    return tl.load(w_ptr + cols[None, :] * R + ranks[:, None], mask=rank_ok[:, None] & col_ok[None, :], other=0.0)


@triton.jit
def _swiglu_tile(gate_ptr, up_ptr, low_g, low_u, b_g, b_u, offsets, mask):
    """(gate, up) of one tile with their LoRA products added, in fp32."""
    gate = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(tl.float32) + tl.dot(low_g, b_g)
    up = tl.load(up_ptr + offsets, mask=mask, other=0.0).to(tl.float32) + tl.dot(low_u, b_u)
    return gate, up


@triton.jit
def _tile(M, N, R, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """This program's rows and columns, their masks, and the rank-r offsets of its rows."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ranks = tl.arange(0, BLOCK_R)
    row_ok, col_ok, rank_ok = rows < M, cols < N, ranks < R
    offsets = rows.to(tl.int64)[:, None] * N + cols[None, :]
    return (rows, cols, ranks, row_ok, col_ok, rank_ok, offsets, row_ok[:, None] & col_ok[None, :],
            rows[:, None] * R + ranks[None, :], row_ok[:, None] & rank_ok[None, :])


@triton.jit
def swiglu_lora_forward_kernel(gate_ptr, up_ptr, low_g_ptr, low_u_ptr, b_g_ptr, b_u_ptr, a_d_ptr,
                               h_ptr, amax_ptr, low_d_parts_ptr, M, N, R,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """h = silu(gate) * up for one tile, gate and up their base outputs plus their LoRA products: writes h, raises
    each row's amax (zeros before the launch), and writes this column block's share of h @ A_d^T (down's lora_A)."""
    rows, cols, ranks, row_ok, col_ok, rank_ok, offsets, mask, low_offsets, low_mask = _tile(
        M, N, R, BLOCK_M, BLOCK_N, BLOCK_R)
    low_g = tl.load(low_g_ptr + low_offsets, mask=low_mask, other=0.0)
    low_u = tl.load(low_u_ptr + low_offsets, mask=low_mask, other=0.0)
    b_g = _rank_tile(b_g_ptr, cols, col_ok, ranks, rank_ok, R)
    b_u = _rank_tile(b_u_ptr, cols, col_ok, ranks, rank_ok, R)
    gate, up = _swiglu_tile(gate_ptr, up_ptr, low_g, low_u, b_g, b_u, offsets, mask)
    h = (gate * tl.sigmoid(gate) * up).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + offsets, h, mask=mask)
    tl.atomic_max(amax_ptr + rows, tl.max(tl.abs(h.to(tl.float32)), axis=1), mask=row_ok)
    # A_d is [R, N] row-major (lora_A of down): its tile read transposed, [BLOCK_N, BLOCK_R]
    a_d = tl.load(a_d_ptr + ranks[None, :] * N + cols[:, None], mask=col_ok[:, None] & rank_ok[None, :], other=0.0)
    tl.store(low_d_parts_ptr + tl.program_id(1) * M * R + low_offsets, tl.dot(h, a_d), mask=low_mask)


@triton.jit
def quantize_rows_kernel(h_ptr, scale_ptr, hq_ptr, M, N, FP8_MAX: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A [M, N] tensor in fp8 (e4m3) with the given scale per row: h for down's fp8 matmul, the gradients of gate and
    up for their bases' input gradient."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offsets = rows.to(tl.int64)[:, None] * N + cols[None, :]
    scale = tl.load(scale_ptr + rows, mask=rows < M, other=1.0)
    h = tl.load(h_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    quantized = tl.clamp(h / scale[:, None], -FP8_MAX, FP8_MAX)
    tl.store(hq_ptr + offsets, quantized.to(hq_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_lora_backward_kernel(dh_ptr, d_low_d_ptr, gate_ptr, up_ptr, low_g_ptr, low_u_ptr, b_g_ptr, b_u_ptr,
                                a_d_ptr, dgate_ptr, dup_ptr, amax_g_ptr, amax_u_ptr, dlow_g_parts_ptr,
                                dlow_u_parts_ptr, h_ptr, M, N, R,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """From the gradients of h (through down's base) and of low_d (through down's lora_B), for one tile: h's whole
    gradient (adding d_low_d @ A_d here), the gradients of gate and up (bf16, full width: the bases' input gradient
    and lora_B's weight gradients read them) with each row's amax raised (for their fp8 quantisation, the bases' input
    gradient), this column block's share of the two rank-r LoRA input gradients, and
    h again (recomputed, for A_d's weight gradient, a sum over every row that one program cannot finish)."""
    rows, cols, ranks, row_ok, col_ok, rank_ok, offsets, mask, low_offsets, low_mask = _tile(
        M, N, R, BLOCK_M, BLOCK_N, BLOCK_R)
    low_g = tl.load(low_g_ptr + low_offsets, mask=low_mask, other=0.0)
    low_u = tl.load(low_u_ptr + low_offsets, mask=low_mask, other=0.0)
    d_low_d = tl.load(d_low_d_ptr + low_offsets, mask=low_mask, other=0.0)
    b_g = _rank_tile(b_g_ptr, cols, col_ok, ranks, rank_ok, R)
    b_u = _rank_tile(b_u_ptr, cols, col_ok, ranks, rank_ok, R)
    a_d = tl.load(a_d_ptr + ranks[:, None] * N + cols[None, :], mask=rank_ok[:, None] & col_ok[None, :], other=0.0)
    gate, up = _swiglu_tile(gate_ptr, up_ptr, low_g, low_u, b_g, b_u, offsets, mask)
    dh = tl.load(dh_ptr + offsets, mask=mask, other=0.0).to(tl.float32) + tl.dot(d_low_d, a_d)
    sig = tl.sigmoid(gate)
    silu = gate * sig
    tl.store(h_ptr + offsets, (silu * up).to(h_ptr.dtype.element_ty), mask=mask)
    d_up = (dh * silu).to(dup_ptr.dtype.element_ty)
    d_gate = (dh * up * sig * (1.0 + gate * (1.0 - sig))).to(dgate_ptr.dtype.element_ty)
    tl.store(dgate_ptr + offsets, d_gate, mask=mask)
    tl.store(dup_ptr + offsets, d_up, mask=mask)
    tl.atomic_max(amax_g_ptr + rows, tl.max(tl.abs(d_gate.to(tl.float32)), axis=1), mask=row_ok)
    tl.atomic_max(amax_u_ptr + rows, tl.max(tl.abs(d_up.to(tl.float32)), axis=1), mask=row_ok)
    part = tl.program_id(1) * M * R + low_offsets
    tl.store(dlow_g_parts_ptr + part, tl.dot(d_gate, tl.trans(b_g)), mask=low_mask)
    tl.store(dlow_u_parts_ptr + part, tl.dot(d_up, tl.trans(b_u)), mask=low_mask)
