"""The Triton kernels of the fused LoRA SwiGLU (model/fused_swiglu.py says what they replace and why). Imported only
where they run: a GPU with Triton (a CPU install has no Triton; the reference in fused_swiglu.py serves it).

Both kernels give each program BLOCK_M whole rows (tokens) and walk the intermediate width in BLOCK_N columns, so a
row's reductions (the fp8 scale's amax, the LoRA input gradients over the width) finish inside one program with no
second kernel. The rank-r LoRA products are recomputed in the tile from the rank-r inputs, never written full-width:
`gate = gate_base + low_g @ B_g^T` is a [BLOCK_M, r] x [r, BLOCK_N] product on the tensor cores.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _lora_sum(base_ptr, low, b_ptr, offsets, mask, cols, col_ok, ranks, rank_ok, R):
    """base + low @ B^T for one [BLOCK_M, BLOCK_N] tile, in fp32; B is lora_B's weight, [N, R] row-major."""
    b = tl.load(b_ptr + cols[None, :] * R + ranks[:, None], mask=rank_ok[:, None] & col_ok[None, :], other=0.0)
    return tl.load(base_ptr + offsets, mask=mask, other=0.0).to(tl.float32) + tl.dot(low, b), b


@triton.jit
def swiglu_lora_forward_kernel(gate_ptr, up_ptr, low_g_ptr, low_u_ptr, b_g_ptr, b_u_ptr,
                               h_ptr, hq_ptr, scale_ptr, M, N, R,
                               FP8_MAX: tl.constexpr, SCALE_FLOOR: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """h = silu(gate) * up with gate and up their base outputs plus their LoRA products; writes h (bf16), h in fp8
    (e4m3) and its scale per row (amax / 448), which the down projection multiplies without quantising again."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    ranks = tl.arange(0, BLOCK_R)
    rank_ok = ranks < R
    low_mask = row_ok[:, None] & rank_ok[None, :]
    low_g = tl.load(low_g_ptr + rows[:, None] * R + ranks[None, :], mask=low_mask, other=0.0)
    low_u = tl.load(low_u_ptr + rows[:, None] * R + ranks[None, :], mask=low_mask, other=0.0)
    row_start = rows.to(tl.int64)[:, None] * N
    amax = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = row_ok[:, None] & col_ok[None, :]
        offsets = row_start + cols[None, :]
        gate, _ = _lora_sum(gate_ptr, low_g, b_g_ptr, offsets, mask, cols, col_ok, ranks, rank_ok, R)
        up, _ = _lora_sum(up_ptr, low_u, b_u_ptr, offsets, mask, cols, col_ok, ranks, rank_ok, R)
        h = (gate * tl.sigmoid(gate) * up).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + offsets, h, mask=mask)
        amax = tl.maximum(amax, tl.max(tl.abs(h.to(tl.float32)), axis=1))
    scale = tl.maximum(amax / FP8_MAX, SCALE_FLOOR)
    tl.store(scale_ptr + rows, scale, mask=row_ok)
    tl.debug_barrier()   # the second pass reads back h this program wrote, from other threads' stores
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols < N)[None, :]
        offsets = row_start + cols[None, :]
        h = tl.load(h_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        quantized = tl.clamp(h / scale[:, None], -FP8_MAX, FP8_MAX)
        tl.store(hq_ptr + offsets, quantized.to(hq_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_lora_backward_kernel(dh_ptr, gate_ptr, up_ptr, low_g_ptr, low_u_ptr, b_g_ptr, b_u_ptr,
                                dgate_ptr, dup_ptr, dlow_g_ptr, dlow_u_ptr, M, N, R,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """From h's gradient: the gradients of gate and up (bf16, full width: the base's input gradient and lora_B's
    weight gradient read them) and of the two rank-r LoRA inputs (d_gate @ B_g, summed over the width here)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    ranks = tl.arange(0, BLOCK_R)
    rank_ok = ranks < R
    low_mask = row_ok[:, None] & rank_ok[None, :]
    low_offsets = rows[:, None] * R + ranks[None, :]
    low_g = tl.load(low_g_ptr + low_offsets, mask=low_mask, other=0.0)
    low_u = tl.load(low_u_ptr + low_offsets, mask=low_mask, other=0.0)
    row_start = rows.to(tl.int64)[:, None] * N
    dlow_g = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    dlow_u = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = row_ok[:, None] & col_ok[None, :]
        offsets = row_start + cols[None, :]
        gate, b_g = _lora_sum(gate_ptr, low_g, b_g_ptr, offsets, mask, cols, col_ok, ranks, rank_ok, R)
        up, b_u = _lora_sum(up_ptr, low_u, b_u_ptr, offsets, mask, cols, col_ok, ranks, rank_ok, R)
        dh = tl.load(dh_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        sig = tl.sigmoid(gate)
        d_up = (dh * gate * sig).to(dup_ptr.dtype.element_ty)
        d_gate = (dh * up * sig * (1.0 + gate * (1.0 - sig))).to(dgate_ptr.dtype.element_ty)
        tl.store(dgate_ptr + offsets, d_gate, mask=mask)
        tl.store(dup_ptr + offsets, d_up, mask=mask)
        dlow_g += tl.dot(d_gate, tl.trans(b_g))
        dlow_u += tl.dot(d_up, tl.trans(b_u))
    tl.store(dlow_g_ptr + low_offsets, dlow_g.to(dlow_g_ptr.dtype.element_ty), mask=low_mask)
    tl.store(dlow_u_ptr + low_offsets, dlow_u.to(dlow_u_ptr.dtype.element_ty), mask=low_mask)
