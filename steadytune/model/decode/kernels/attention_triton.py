"""Flash-decoding: one query token per row against that row's columns of the slot cache, split along the columns.

Grid (row, kv head, split). A program loads the kv head's G query heads (GQA: G = heads / kv heads; padded to 16 for
the tensor cores) and walks its split's columns in blocks of BLOCK columns, keeping a running max, sum and weighted sum of
values (the online softmax); it reads only columns its row has (start..length: a row of 40 tokens in a bucket of
2,048 columns reads 40), and a split past the row's end does nothing. A second kernel merges the splits of each
(row, head) by their log-sum-exp. The number of splits is chosen per recorded shape so that rows x kv heads x splits
fills the GPU about twice over (one row and 2 kv heads alone would otherwise leave all but 2 multiprocessors idle).

Products run on the tensor cores in the cache's dtype (bf16/fp16) with fp32 sums; an fp32 cache multiplies in full
fp32 ("ieee", not tf32), as the CPU path does. Block sizes and warps per GPU family come from
model/kernel_catalogue.py (attention_blocks), where every choice is compiled for every target.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import triton
import triton.language as tl

from steadytune.model.kernel_catalogue import attention_blocks, attention_splits, device_arch, dtype_name

NO_WINDOW = 1 << 30
# Triton's interpreter (3.6) multiplies bf16 tiles in tl.dot as raw integers: under it the products run in fp32.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _split_kernel(Q, K, V, L, O_part, M_part, S_part, scaling, window, chunk,
                  stride_qr, stride_qh, stride_ks, stride_kh, stride_kc, stride_vs, stride_vh, stride_vc,
                  SPLITS: tl.constexpr, G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK: tl.constexpr, IEEE: tl.constexpr):
    r = tl.program_id(0)
    kvh = tl.program_id(1)
    s = tl.program_id(2)
    pos = tl.load(L + r).to(tl.int32)                       # the new token's column: it sees start..pos
    start = tl.maximum(pos - window + 1, 0)                 # window: a huge number for a full layer
    lo = tl.maximum(start, s * chunk)
    hi = tl.minimum(pos + 1, (s + 1) * chunk)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kvh * G + g
    q = tl.load(Q + r * stride_qr + heads[:, None] * stride_qh + d[None, :],
                mask=(g[:, None] < G) & (d[None, :] < D), other=0.0)
    q = (q.to(tl.float32) * scaling).to(K.dtype.element_ty)
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_base = K + r.to(tl.int64) * stride_ks + kvh * stride_kh
    v_base = V + r.to(tl.int64) * stride_vs + kvh * stride_vh
    for c0 in range(lo, hi, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        ok = cols < hi
        k = tl.load(k_base + cols[:, None] * stride_kc + d[None, :], mask=ok[:, None] & (d[None, :] < D), other=0.0)
        if IEEE:
            scores = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
        else:
            scores = tl.dot(q, tl.trans(k))
        scores = tl.where(ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m - m_new)
        v = tl.load(v_base + cols[:, None] * stride_vc + d[None, :], mask=ok[:, None] & (d[None, :] < D), other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        total = total * alpha + tl.sum(p, axis=1)
        m = m_new
    part = (r * (G * tl.num_programs(1)) + heads) * SPLITS + s
    tl.store(O_part + part[:, None] * D + d[None, :], acc, mask=(g[:, None] < G) & (d[None, :] < D))
    tl.store(M_part + part, m, mask=g < G)
    tl.store(S_part + part, total, mask=g < G)


@triton.jit
def _merge_kernel(O_part, M_part, S_part, Out, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, D: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    row_head = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    m = tl.load(M_part + row_head * SPLITS + s, mask=s < SPLITS, other=float("-inf"))
    total = tl.load(S_part + row_head * SPLITS + s, mask=s < SPLITS, other=0.0)
    top = tl.max(m, axis=0)
    weight = tl.where(s < SPLITS, tl.exp(m - top), 0.0)
    o = tl.load(O_part + (row_head * SPLITS + s)[:, None] * D + d[None, :], mask=(s[:, None] < SPLITS) & (d[None, :] < D),
                other=0.0)
    out = tl.sum(o * weight[:, None], axis=0) / tl.sum(total * weight, axis=0)
    tl.store(Out + row_head * D + d, out.to(Out.dtype.element_ty), mask=d < D)


def split_decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
                           columns: int, window: Optional[int], scaling: float) -> torch.Tensor:
    """q [rows, heads, dim]; keys, values [slots, kv heads, capacity, dim] (dim contiguous); lengths [rows] ->
    [rows, heads * dim]. `columns` bounds every row's length (the recorded step's bucket): it sets the splits."""
    rows, heads, dim = q.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    if q.stride(2) != 1:
        q = q.contiguous()   # the kernel steps rows and heads by their strides (q may be a view of the fused q|k|v)
    arch, dtype = device_arch(q.device), dtype_name(keys.dtype)
    block = attention_blocks(group, dim, 1, dtype, arch)["BLOCK"]
    splits = attention_splits(rows, kv_heads, columns, block)
    b = attention_blocks(group, dim, splits, dtype, arch)
    chunk = triton.cdiv(triton.cdiv(columns, splits), block) * block
    o_part = torch.empty(rows * heads * splits, dim, dtype=torch.float32, device=q.device)
    m_part = torch.empty(rows * heads * splits, dtype=torch.float32, device=q.device)
    s_part = torch.empty_like(m_part)
    _split_kernel[(rows, kv_heads, splits)](
        q, keys, values, lengths, o_part, m_part, s_part, float(scaling), int(window or NO_WINDOW), chunk,
        q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), keys.stride(2),
        values.stride(0), values.stride(1), values.stride(2),
        SPLITS=splits, G=group, BLOCK_G=b["BLOCK_G"], D=dim, BLOCK_D=b["BLOCK_D"], BLOCK=block,
        IEEE=keys.dtype == torch.float32 or INTERPRETED, num_warps=b["split_warps"])
    out = torch.empty(rows, heads, dim, dtype=q.dtype, device=q.device)
    _merge_kernel[(rows * heads,)](o_part, m_part, s_part, out, SPLITS=splits, BLOCK_S=b["BLOCK_S"], D=dim,
                                   BLOCK_D=b["BLOCK_D"], num_warps=b["merge_warps"])
    return out.view(rows, heads * dim)
