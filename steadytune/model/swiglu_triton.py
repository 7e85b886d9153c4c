"""The Triton kernels of the fused LoRA SwiGLU (model/fused_swiglu.py says what they replace and why). Imported only
where they run: a GPU with Triton (a CPU install has no Triton; the reference in fused_swiglu.py serves it).

Both kernels give each program BLOCK_M whole rows (tokens) and walk the intermediate width in BLOCK_N columns, so a
row's reductions (the fp8 scale's amax, the rank-r products over the width) finish inside one program with no
second kernel. The rank-r LoRA products are recomputed in the tile from the rank-r inputs, never written full-width:
`gate = gate_base + low_g @ B_g^T` is a [BLOCK_M, r] x [r, BLOCK_N] product on the tensor cores.
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
def swiglu_lora_forward_kernel(gate_ptr, up_ptr, low_g_ptr, low_u_ptr, b_g_ptr, b_u_ptr, a_d_ptr,
                               h_ptr, hq_ptr, scale_ptr, low_d_ptr, M, N, R,
                               FP8_MAX: tl.constexpr, SCALE_FLOOR: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """h = silu(gate) * up with gate and up their base outputs plus their LoRA products. Writes h (bf16: the down
    projection's input, for its gradient's shape only; nothing keeps it), h in fp8 (e4m3) with its scale per row
    (amax / 448), which down's fp8 matmul takes as it is, and low_d = h @ A_d^T, down's lora_A product."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    ranks = tl.arange(0, BLOCK_R)
    rank_ok = ranks < R
    low_mask = row_ok[:, None] & rank_ok[None, :]
    low_offsets = rows[:, None] * R + ranks[None, :]
    low_g = tl.load(low_g_ptr + low_offsets, mask=low_mask, other=0.0)
    low_u = tl.load(low_u_ptr + low_offsets, mask=low_mask, other=0.0)
    row_start = rows.to(tl.int64)[:, None] * N
    amax = tl.zeros([BLOCK_M], dtype=tl.float32)
    low_d = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = row_ok[:, None] & col_ok[None, :]
        offsets = row_start + cols[None, :]
        b_g = _rank_tile(b_g_ptr, cols, col_ok, ranks, rank_ok, R)
        b_u = _rank_tile(b_u_ptr, cols, col_ok, ranks, rank_ok, R)
        gate, up = _swiglu_tile(gate_ptr, up_ptr, low_g, low_u, b_g, b_u, offsets, mask)
        h = (gate * tl.sigmoid(gate) * up).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + offsets, h, mask=mask)
        amax = tl.maximum(amax, tl.max(tl.abs(h.to(tl.float32)), axis=1))
        # A_d is [R, N] row-major (lora_A of down): its tile read transposed, [BLOCK_N, BLOCK_R]
        a_d = tl.load(a_d_ptr + ranks[None, :] * N + cols[:, None], mask=col_ok[:, None] & rank_ok[None, :],
                      other=0.0)
        low_d += tl.dot(h, a_d)
    scale = tl.maximum(amax / FP8_MAX, SCALE_FLOOR)
    tl.store(scale_ptr + rows, scale, mask=row_ok)
    tl.store(low_d_ptr + low_offsets, low_d.to(low_d_ptr.dtype.element_ty), mask=low_mask)
    tl.debug_barrier()   # the second pass reads back h this program wrote, from other threads' stores
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols < N)[None, :]
        offsets = row_start + cols[None, :]
        h = tl.load(h_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        quantized = tl.clamp(h / scale[:, None], -FP8_MAX, FP8_MAX)
        tl.store(hq_ptr + offsets, quantized.to(hq_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_lora_backward_kernel(dh_ptr, d_low_d_ptr, gate_ptr, up_ptr, low_g_ptr, low_u_ptr, b_g_ptr, b_u_ptr,
                                a_d_ptr, dgate_ptr, dup_ptr, dlow_g_ptr, dlow_u_ptr, h_ptr, M, N, R,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """From the gradients of h (through down's base) and of low_d (through down's lora_B): h's whole gradient
    (adding d_low_d @ A_d in the tile), the gradients of gate and up (bf16, full width: the bases' input gradient
    and lora_B's weight gradients read them), of the two rank-r LoRA inputs (summed over the width here), and h
    again (recomputed, for A_d's weight gradient, a sum over every row that one program cannot finish)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    ranks = tl.arange(0, BLOCK_R)
    rank_ok = ranks < R
    low_mask = row_ok[:, None] & rank_ok[None, :]
    low_offsets = rows[:, None] * R + ranks[None, :]
    low_g = tl.load(low_g_ptr + low_offsets, mask=low_mask, other=0.0)
    low_u = tl.load(low_u_ptr + low_offsets, mask=low_mask, other=0.0)
    d_low_d = tl.load(d_low_d_ptr + low_offsets, mask=low_mask, other=0.0)
    row_start = rows.to(tl.int64)[:, None] * N
    dlow_g = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    dlow_u = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = row_ok[:, None] & col_ok[None, :]
        offsets = row_start + cols[None, :]
        b_g = _rank_tile(b_g_ptr, cols, col_ok, ranks, rank_ok, R)
        b_u = _rank_tile(b_u_ptr, cols, col_ok, ranks, rank_ok, R)
        a_d = tl.load(a_d_ptr + ranks[:, None] * N + cols[None, :], mask=rank_ok[:, None] & col_ok[None, :],
                      other=0.0)
        gate, up = _swiglu_tile(gate_ptr, up_ptr, low_g, low_u, b_g, b_u, offsets, mask)
        dh = tl.load(dh_ptr + offsets, mask=mask, other=0.0).to(tl.float32) + tl.dot(d_low_d, a_d)
        sig = tl.sigmoid(gate)
        silu = gate * sig
        tl.store(h_ptr + offsets, (silu * up).to(h_ptr.dtype.element_ty), mask=mask)
        d_up = (dh * silu).to(dup_ptr.dtype.element_ty)
        d_gate = (dh * up * sig * (1.0 + gate * (1.0 - sig))).to(dgate_ptr.dtype.element_ty)
        tl.store(dgate_ptr + offsets, d_gate, mask=mask)
        tl.store(dup_ptr + offsets, d_up, mask=mask)
        dlow_g += tl.dot(d_gate, tl.trans(b_g))
        dlow_u += tl.dot(d_up, tl.trans(b_u))
    tl.store(dlow_g_ptr + low_offsets, dlow_g.to(dlow_g_ptr.dtype.element_ty), mask=low_mask)
    tl.store(dlow_u_ptr + low_offsets, dlow_u.to(dlow_u_ptr.dtype.element_ty), mask=low_mask)
