"""Sampling for rows that need no sort (greedy, temperature, min_p, repetition penalty), over the vocabulary split in
chunks so that a single row still fills the GPU: one program per (row, chunk of CHUNK tokens), then one per row.

1. `_chunk_top_kernel`: each chunk's penalised logits' maximum, its first index (torch.argmax's choice among ties) and
   whether the chunk is broken (a nan or +inf).
2. `_chunk_draw_kernel` (sampled rows only): the row's maximum from the chunks' (every program reads them all: a few
   dozen floats), then the chunk's Gumbel-max draw, argmax over the kept tokens of (logit - max) / t + g with g from
   the same 32-bit hash of (row seed, token) as sampling.py (integer arithmetic in int64 masked to 32 bits: the same
   bits as the torch code). min_p keeps tokens with (logit - max) / t >= log(min_p).
3. `_pick_kernel`: per row, the best chunk (the first among equal maxima, so the first index overall), the token, and
   whether the row is broken (a broken chunk, or every logit -inf).
The first version ran one program per row over its whole vocabulary, twice: 110 us of a 2.4 ms step at 32 rows of the
0.5B shape's 151,936 tokens (torch.profiler on an H100, 2026-12-06), the same at one row. Rows needing top_k or top_p
(a sort of the vocabulary) go through sampling.sample_rows instead: the recorded step for such a batch uses that.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from steadytune.model.decode.sampling import (GREEDY_BELOW, HASH_A, HASH_B, M32, TRUNCATE, WEYL, RowSettings,
                                              row_seeds, sample_rows)
from steadytune.model.kernel_catalogue import SAMPLE_BLOCK_V as BLOCK_V
from steadytune.model.kernel_catalogue import SAMPLE_CHUNK as CHUNK  # 38 programs for 151,936 tokens, 64 for 262,144


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
def _penalised(Logits, Seen, Penalty, r, v, ok, stride_l, stride_s, PENALTY: tl.constexpr):
    x = tl.load(Logits + r * stride_l + v, mask=ok, other=float("-inf")).to(tl.float32)
    if PENALTY:
        seen = tl.load(Seen + r * stride_s + v, mask=ok, other=0) != 0
        p = tl.load(Penalty + r)
        x = tl.where(seen, tl.where(x < 0, x * p, x / p), x)
    return x


@triton.jit
def _running_best(values, v0, top, best):
    """A block of values (tokens v0...) folded into a running (largest value, its first index): an earlier block keeps
    a tie, as tl.argmax keeps the first index within one (torch.argmax's choice)."""
    block_top = tl.max(values, axis=0)
    block_best = tl.argmax(values, axis=0).to(tl.int64) + v0
    return tl.maximum(top, block_top), tl.where(block_top > top, block_best, best)


@triton.jit
def _chunk_top_kernel(Logits, Seen, Penalty, Top, Best, Bad, V, stride_l, stride_s, CHUNKS: tl.constexpr,
                      PENALTY: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.program_id(1)
    top = tl.full([], float("-inf"), tl.float32)
    best = tl.full([], 0, tl.int64)
    bad = tl.full([], 0, tl.int32)
    for v0 in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
        v = v0 + tl.arange(0, BLOCK)
        ok = v < V
        x = _penalised(Logits, Seen, Penalty, r, v, ok, stride_l, stride_s, PENALTY)
        bad = bad | tl.max(((x != x) | (x == float("inf"))).to(tl.int32), axis=0)
        top, best = _running_best(x, v0, top, best)
    tl.store(Top + r * CHUNKS + c, top)
    tl.store(Best + r * CHUNKS + c, best)
    tl.store(Bad + r * CHUNKS + c, bad)


@triton.jit
def _row_top(Top, r, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr):
    chunks = tl.arange(0, BLOCK_C)
    return tl.max(tl.load(Top + r * CHUNKS + chunks, mask=chunks < CHUNKS, other=float("-inf")), axis=0)


@triton.jit
def _chunk_draw_kernel(Logits, Seen, Temperature, MinP, Penalty, Seeds, Top, Score, Drawn, V, stride_l, stride_s,
                       greedy_below, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr, PENALTY: tl.constexpr,
                       CHUNK: tl.constexpr, BLOCK: tl.constexpr, HASH_A: tl.constexpr, HASH_B: tl.constexpr,
                       M32: tl.constexpr, WEYL: tl.constexpr):
    r = tl.program_id(0)
    c = tl.program_id(1)
    t = tl.load(Temperature + r)
    if t >= greedy_below:
        top = _row_top(Top, r, CHUNKS, BLOCK_C)
        seed = tl.load(Seeds + r)
        min_p = tl.load(MinP + r)
        floor = tl.where(min_p > 0, tl.log(tl.maximum(min_p, 1e-30)), float("-inf"))
        score_top = tl.full([], float("-inf"), tl.float32)
        drawn = tl.full([], 0, tl.int64)
        for v0 in range(c * CHUNK, c * CHUNK + CHUNK, BLOCK):
            v = v0 + tl.arange(0, BLOCK)
            ok = v < V
            x = _penalised(Logits, Seen, Penalty, r, v, ok, stride_l, stride_s, PENALTY)
            scaled = (x - top) / t
            bits = _hash32((seed + v.to(tl.int64) * WEYL) & M32, HASH_A, HASH_B, M32)
            u = ((bits >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
            score = scaled - tl.log(-tl.log(u))
            score = tl.where(ok & (scaled >= floor), score, float("-inf"))
            score_top, drawn = _running_best(score, v0, score_top, drawn)
        tl.store(Score + r * CHUNKS + c, score_top)
        tl.store(Drawn + r * CHUNKS + c, drawn)


@triton.jit
def _first_best(Value, Index, r, CHUNKS: tl.constexpr, BLOCK_C: tl.constexpr):
    """The index of the first chunk holding the row's largest value (ties: the lowest chunk, so the lowest token)."""
    chunks = tl.arange(0, BLOCK_C)
    ok = chunks < CHUNKS
    values = tl.load(Value + r * CHUNKS + chunks, mask=ok, other=float("-inf"))
    first = tl.min(tl.where(ok & (values == tl.max(values, axis=0)), chunks, BLOCK_C), axis=0)
    return tl.load(Index + r * CHUNKS + tl.minimum(first, CHUNKS - 1))


@triton.jit
def _pick_kernel(Temperature, Top, Best, Bad, Score, Drawn, Tokens, Broken, greedy_below, CHUNKS: tl.constexpr,
                 BLOCK_C: tl.constexpr, SAMPLE: tl.constexpr):
    r = tl.program_id(0)
    chunks = tl.arange(0, BLOCK_C)
    ok = chunks < CHUNKS
    bad = tl.max(tl.load(Bad + r * CHUNKS + chunks, mask=ok, other=0), axis=0)
    top = _row_top(Top, r, CHUNKS, BLOCK_C)
    token = _first_best(Top, Best, r, CHUNKS, BLOCK_C)
    if SAMPLE:
        if tl.load(Temperature + r) >= greedy_below:
            token = _first_best(Score, Drawn, r, CHUNKS, BLOCK_C)
    tl.store(Tokens + r, token)
    tl.store(Broken + r, ((bad != 0) | (top == float("-inf"))).to(tl.int8))


def sample_rows_triton(logits: torch.Tensor, settings: RowSettings, kind: int,
                       seen: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """sampling.sample_rows in three kernels (kinds GREEDY and SAMPLE; two for GREEDY); TRUNCATE goes to the torch
    sampler."""
    if kind >= TRUNCATE:
        return sample_rows(logits, settings, kind, seen)
    rows, vocab = logits.shape
    chunks = triton.cdiv(vocab, CHUNK)
    block_c = max(2, triton.next_power_of_2(chunks))
    device = logits.device
    top = torch.empty(rows, chunks, dtype=torch.float32, device=device)
    best = torch.empty(rows, chunks, dtype=torch.long, device=device)
    bad = torch.empty(rows, chunks, dtype=torch.int32, device=device)
    tokens = torch.empty(rows, dtype=torch.long, device=device)
    broken = torch.empty(rows, dtype=torch.int8, device=device)
    seen_u8 = seen.view(torch.uint8) if seen is not None else tokens
    stride_s = seen.stride(0) if seen is not None else 0
    penalty = seen is not None
    _chunk_top_kernel[(rows, chunks)](logits, seen_u8, settings.penalty, top, best, bad, vocab, logits.stride(0),
                                      stride_s, CHUNKS=chunks, PENALTY=penalty, CHUNK=CHUNK, BLOCK=BLOCK_V)
    score, drawn = top, best      # unread by a greedy batch
    if kind > 0:
        score = torch.empty_like(top)
        drawn = torch.empty_like(best)
        seeds = row_seeds(settings.keys, settings.positions)
        _chunk_draw_kernel[(rows, chunks)](logits, seen_u8, settings.temperature, settings.min_p, settings.penalty,
                                           seeds, top, score, drawn, vocab, logits.stride(0), stride_s, GREEDY_BELOW,
                                           CHUNKS=chunks, BLOCK_C=block_c, PENALTY=penalty, CHUNK=CHUNK,
                                           BLOCK=BLOCK_V, HASH_A=HASH_A, HASH_B=HASH_B, M32=M32, WEYL=WEYL)
    _pick_kernel[(rows,)](settings.temperature, top, best, bad, score, drawn, tokens, broken, GREEDY_BELOW,
                          CHUNKS=chunks, BLOCK_C=block_c, SAMPLE=kind > 0)
    return tokens, broken.bool()
