"""Sampling in one kernel per step for rows that need no sort (greedy, temperature, min_p, repetition penalty):
one program per row makes two passes over its logits, read in the model's dtype.

Pass 1: the penalised logits' maximum and its first index (greedy's token; torch.argmax's choice among ties), and
whether the row is broken (a nan or +inf, or every logit -inf). Pass 2 (sampled rows only): the Gumbel-max draw,
argmax over the kept tokens of (logit - max) / t + g with g from the same 32-bit hash of (row seed, token) as
sampling.py (integer arithmetic in int64 masked to 32 bits: the same bits as the torch code). min_p keeps tokens with
(logit - max) / t >= log(min_p). Rows needing top_k or top_p (a sort of the vocabulary) go through sampling.sample_rows
instead: the recorded step for such a batch uses that.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from steadytune.model.decode.sampling import (GREEDY_BELOW, HASH_A, HASH_B, M32, TRUNCATE, WEYL, RowSettings,
                                              row_seeds, sample_rows)
from steadytune.model.kernel_catalogue import SAMPLE_BLOCK_V


@triton.jit
def _hash32(x, HASH_A: tl.constexpr, HASH_B: tl.constexpr, M32: tl.constexpr):
    # The constants come in as constexpr arguments: a @triton.jit function may not read module globals (the
    # interpreter allows it, the compiler refuses with "Cannot access global variable").
    x = x ^ (x >> 16)
    x = (x * HASH_A) & M32
    x = x ^ (x >> 15)
    x = (x * HASH_B) & M32
    return x ^ (x >> 16)


@triton.jit
def _penalised(Logits, Seen, Penalty, r, v, ok, stride_l, stride_s, V_OK: tl.constexpr, PENALTY: tl.constexpr):
    x = tl.load(Logits + r * stride_l + v, mask=ok, other=float("-inf")).to(tl.float32)
    if PENALTY:
        seen = tl.load(Seen + r * stride_s + v, mask=ok, other=0) != 0
        p = tl.load(Penalty + r)
        x = tl.where(seen, tl.where(x < 0, x * p, x / p), x)
    return x


@triton.jit
def _sample_kernel(Logits, Seen, Temperature, MinP, Penalty, Seeds, Tokens, Broken, V, stride_l, stride_s,
                   greedy_below, SAMPLE: tl.constexpr, PENALTY: tl.constexpr, BLOCK: tl.constexpr,
                   HASH_A: tl.constexpr, HASH_B: tl.constexpr, M32: tl.constexpr, WEYL: tl.constexpr):
    r = tl.program_id(0)
    top = tl.full([], float("-inf"), tl.float32)
    best = tl.full([], 0, tl.int64)
    bad = tl.full([], 0, tl.int32)
    for v0 in range(0, V, BLOCK):
        v = v0 + tl.arange(0, BLOCK)
        ok = v < V
        x = _penalised(Logits, Seen, Penalty, r, v, ok, stride_l, stride_s, True, PENALTY)
        bad = bad | tl.max(((x != x) | (x == float("inf"))).to(tl.int32), axis=0)
        block_top = tl.max(x, axis=0)
        block_best = tl.argmax(x, axis=0).to(tl.int64) + v0
        better = block_top > top
        best = tl.where(better, block_best, best)
        top = tl.maximum(top, block_top)
    broken = (bad != 0) | (top == float("-inf"))
    t = tl.load(Temperature + r)
    token = best
    if SAMPLE:
        if t >= greedy_below:
            seed = tl.load(Seeds + r)
            min_p = tl.load(MinP + r)
            floor = tl.where(min_p > 0, tl.log(tl.maximum(min_p, 1e-30)), float("-inf"))
            score_top = tl.full([], float("-inf"), tl.float32)
            drawn = tl.full([], 0, tl.int64)
            for v0 in range(0, V, BLOCK):
                v = v0 + tl.arange(0, BLOCK)
                ok = v < V
                x = _penalised(Logits, Seen, Penalty, r, v, ok, stride_l, stride_s, True, PENALTY)
                scaled = (x - top) / t
                bits = _hash32((seed + v.to(tl.int64) * WEYL) & M32, HASH_A, HASH_B, M32)
                u = ((bits >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
                score = scaled - tl.log(-tl.log(u))
                score = tl.where(ok & (scaled >= floor), score, float("-inf"))
                block_top = tl.max(score, axis=0)
                block_best = tl.argmax(score, axis=0).to(tl.int64) + v0
                better = block_top > score_top
                drawn = tl.where(better, block_best, drawn)
                score_top = tl.maximum(score_top, block_top)
            token = drawn
    tl.store(Tokens + r, token)
    tl.store(Broken + r, broken.to(tl.int8))


def sample_rows_triton(logits: torch.Tensor, settings: RowSettings, kind: int,
                       seen: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """sampling.sample_rows in one kernel (kinds GREEDY and SAMPLE); TRUNCATE goes to the torch sampler."""
    if kind >= TRUNCATE:
        return sample_rows(logits, settings, kind, seen)
    rows, vocab = logits.shape
    tokens = torch.empty(rows, dtype=torch.long, device=logits.device)
    broken = torch.empty(rows, dtype=torch.int8, device=logits.device)
    seeds = row_seeds(settings.keys, settings.positions)
    seen_u8 = seen.view(torch.uint8) if seen is not None else tokens
    _sample_kernel[(rows,)](logits, seen_u8, settings.temperature, settings.min_p, settings.penalty, seeds, tokens,
                            broken, vocab, logits.stride(0), seen.stride(0) if seen is not None else 0,
                            GREEDY_BELOW, SAMPLE=kind > 0, PENALTY=seen is not None, BLOCK=SAMPLE_BLOCK_V,
                            HASH_A=HASH_A, HASH_B=HASH_B, M32=M32, WEYL=WEYL)
    return tokens, broken.bool()


