"""The small operations of a decode step, each one kernel (ops.TorchOps holds the arithmetic they follow):

add_norm      h <- h + a (a first through Gemma's post-block norm, when the layer has one); x = RMSNorm(h). One
              program per row reads h and a once and writes both; values are rounded to the model's dtype where
              transformers rounds them (after the add, the norm's cast), so bf16 results match its own closely.
rotary_store  per (row, head): the q/k RMSNorm of Qwen3 and Gemma 3, rotary at the row's position (cos/sin read from
              the tables at its length), the rotated query written back, the rotated key and the value written into
              the slot cache at column length. Replaces 2 norms, ~10 rotary ops and 2 scatters.
act_mul       act(gate) * up, act SiLU or tanh-GELU (Gemma), in one pass.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from steadytune.model.decode.norms import Norm
from steadytune.model.kernel_catalogue import ACT_BLOCK, norm_block


@triton.jit
def _rms(x, w, eps, N, GEMMA: tl.constexpr, OUT_DTYPE: tl.constexpr):
    """RMSNorm of a row held in fp32 (zeros beyond N), as transformers computes it -> fp32 of OUT_DTYPE values."""
    variance = tl.sum(x * x, axis=0) / N
    normed = x * tl.rsqrt(variance + eps)
    if GEMMA:
        return (normed * (1.0 + w)).to(OUT_DTYPE).to(tl.float32)
    return (normed.to(OUT_DTYPE).to(tl.float32) * w).to(OUT_DTYPE).to(tl.float32)


@triton.jit
def _add_norm_kernel(H, A, X, W, PreW, stride_h, stride_a, stride_x, N, eps, pre_eps, HAS_ADD: tl.constexpr,
                     HAS_PRE: tl.constexpr, GEMMA: tl.constexpr, PRE_GEMMA: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    i = tl.arange(0, BLOCK)
    ok = i < N
    dtype = H.dtype.element_ty
    h = tl.load(H + r * stride_h + i, mask=ok, other=0.0).to(tl.float32)
    if HAS_ADD:
        a = tl.load(A + r * stride_a + i, mask=ok, other=0.0).to(tl.float32)
        if HAS_PRE:
            pw = tl.load(PreW + i, mask=ok, other=0.0).to(tl.float32)
            a = _rms(a, pw, pre_eps, N, PRE_GEMMA, dtype)
        h = (h + a).to(dtype).to(tl.float32)
        tl.store(H + r * stride_h + i, h.to(dtype), mask=ok)
    w = tl.load(W + i, mask=ok, other=0.0).to(tl.float32)
    tl.store(X + r * stride_x + i, _rms(h, w, eps, N, GEMMA, dtype).to(X.dtype.element_ty), mask=ok)


def add_norm(h: torch.Tensor, a: Optional[torch.Tensor], pre: Optional[Norm], norm: Norm):
    """-> (h + pre(a) (h updated in place), norm of it); with a None: (h, norm(h))."""
    rows, width = h.shape
    x = torch.empty_like(h)
    pre_weight = pre.weight if pre is not None else norm.weight
    block, warps = norm_block(width)
    _add_norm_kernel[(rows,)](h, a if a is not None else h, x, norm.weight, pre_weight, h.stride(0),
                              a.stride(0) if a is not None else 0, x.stride(0), width, norm.eps,
                              pre.eps if pre is not None else 0.0, HAS_ADD=a is not None, HAS_PRE=pre is not None,
                              GEMMA=norm.gemma, PRE_GEMMA=pre.gemma if pre is not None else False,
                              BLOCK=block, num_warps=warps)
    return h, x


@triton.jit
def _rotary_store_kernel(Q, K, V, QW, KW, Cos, Sin, L, Keys, Values, stride_qr, stride_kr, stride_vr,
                         stride_cs, stride_ks, stride_kh, stride_kc, stride_vs, stride_vh, stride_vc, q_eps, k_eps,
                         HEADS: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, HAS_NORM: tl.constexpr,
                         GEMMA: tl.constexpr):
    r = tl.program_id(0)
    j = tl.program_id(1)                      # heads of q first, then those of k
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    half: tl.constexpr = D // 2
    partner = tl.where(d < half, d + half, d - half)
    sign = tl.where(d < half, -1.0, 1.0)
    pos = tl.load(L + r)
    cos = tl.load(Cos + pos * stride_cs + d, mask=ok, other=0.0).to(tl.float32)
    sin = tl.load(Sin + pos * stride_cs + d, mask=ok, other=0.0).to(tl.float32)
    is_q = j < HEADS
    dtype = Q.dtype.element_ty                # q and k come out of projections of one dtype
    if is_q:
        src = Q + r * stride_qr + j * D
    else:
        src = K + r * stride_kr + (j - HEADS) * D
    x = tl.load(src + d, mask=ok, other=0.0).to(tl.float32)
    xp = tl.load(src + partner, mask=ok, other=0.0).to(tl.float32)
    if HAS_NORM:
        if is_q:
            w = tl.load(QW + d, mask=ok, other=0.0).to(tl.float32)
            wp = tl.load(QW + partner, mask=ok, other=0.0).to(tl.float32)
            eps = q_eps
        else:
            w = tl.load(KW + d, mask=ok, other=0.0).to(tl.float32)
            wp = tl.load(KW + partner, mask=ok, other=0.0).to(tl.float32)
            eps = k_eps
        scale = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
        if GEMMA:
            x = (x * scale * (1.0 + w)).to(dtype).to(tl.float32)
            xp = (xp * scale * (1.0 + wp)).to(dtype).to(tl.float32)
        else:
            x = ((x * scale).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
            xp = ((xp * scale).to(dtype).to(tl.float32) * wp).to(dtype).to(tl.float32)
    out = x * cos + sign * xp * sin
    if is_q:
        tl.store(Q + r * stride_qr + j * D + d, out.to(dtype), mask=ok)
    else:
        h = j - HEADS
        tl.store(Keys + r.to(tl.int64) * stride_ks + h * stride_kh + pos * stride_kc + d,
                 out.to(Keys.dtype.element_ty), mask=ok)
        v = tl.load(V + r * stride_vr + h * D + d, mask=ok, other=0.0)
        tl.store(Values + r.to(tl.int64) * stride_vs + h * stride_vh + pos * stride_vc + d,
                 v.to(Values.dtype.element_ty), mask=ok)


def rotary_store(q, k, v, q_norm: Optional[Norm], k_norm: Optional[Norm], cos_table, sin_table, lengths, keys,
                 values):
    """q [rows, heads, dim], k and v [rows, kv heads, dim] -> q rotated (in place when contiguous); the rotated key
    and the value written into keys/values [slots, kv heads, capacity, dim] at each row's length."""
    rows, heads, dim = q.shape
    kv_heads = k.shape[1]
    # Views of the fused q|k|v output (runner.py) are read and written in place: the kernel steps rows by their own
    # stride and needs only each row's heads packed.
    q, k, v = packed_heads(q), packed_heads(k), packed_heads(v)
    has_norm = q_norm is not None
    _rotary_store_kernel[(rows, heads + kv_heads)](
        q, k, v, q_norm.weight if has_norm else q, k_norm.weight if has_norm else k, cos_table, sin_table, lengths,
        keys, values, q.stride(0), k.stride(0), v.stride(0), cos_table.stride(0), keys.stride(0), keys.stride(1),
        keys.stride(2), values.stride(0), values.stride(1), values.stride(2),
        q_norm.eps if has_norm else 0.0, k_norm.eps if has_norm else 0.0, HEADS=heads, D=dim,
        BLOCK_D=triton.next_power_of_2(dim), HAS_NORM=has_norm, GEMMA=has_norm and q_norm.gemma)
    return q


def packed_heads(x: torch.Tensor) -> torch.Tensor:
    """x [rows, heads, dim] as is when each row's heads lie packed (any row stride), else a contiguous copy."""
    return x if x.stride(2) == 1 and x.stride(1) == x.shape[2] else x.contiguous()


@triton.jit
def _act_mul_kernel(G, U, Out, N, stride_g, stride_u, stride_o, GELU: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    g = tl.load(G + r * stride_g + i, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(U + r * stride_u + i, mask=ok, other=0.0).to(tl.float32)
    if GELU:   # tanh(z) = 2 sigmoid(2z) - 1
        z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        act = 0.5 * g * (2.0 * tl.sigmoid(2.0 * z))
    else:
        act = g * tl.sigmoid(g)
    dtype = Out.dtype.element_ty
    tl.store(Out + r * stride_o + i, (act.to(dtype).to(tl.float32) * u).to(dtype), mask=ok)


def act_mul(gate: torch.Tensor, up: torch.Tensor, act: str) -> torch.Tensor:
    """act(gate) * up for [rows, width] tensors whose rows may be strided (the halves of the fused gate|up output)."""
    gate = gate if gate.stride(-1) == 1 else gate.contiguous()
    up = up if up.stride(-1) == 1 else up.contiguous()
    rows, width = gate.shape
    out = torch.empty(rows, width, dtype=gate.dtype, device=gate.device)
    _act_mul_kernel[(rows, triton.cdiv(width, ACT_BLOCK))](gate, up, out, width, gate.stride(0), up.stride(0),
                                                           out.stride(0), GELU=act == "gelu_tanh", BLOCK=ACT_BLOCK)
    return out
