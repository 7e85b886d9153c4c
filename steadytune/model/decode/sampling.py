"""Choosing the next token of each row: greedy at temperature 0, else temperature, top_k and nucleus (top_p)
sampling, seeded per sequence when the request gives a seed (so a seeded answer does not depend on what else is in
the batch).

No request can make inf or nan here, and no row can break another (issue 25: `temperature: 1e-300` is 0 in float32,
logits / 0 gave nan, and torch.multinomial failed the whole decode step):
- a temperature below GREEDY_BELOW (vLLM's `_SAMPLING_EPS`) is greedy: that is where softmax(logits / t) goes as t
  falls, and it is what vLLM does;
- logits are scaled as (logits - row max) / t: every value is <= 0, the top one exactly 0, so nothing overflows at
  any temperature and every row keeps a token of probability > 0;
- top_k and top_p always keep the top token (a top_p that rounds to 0 is greedy, a top_k past the vocabulary keeps
  it all);
- a row whose own logits are broken (nan, +inf, or every one -inf: the model's numbers, not the request's) is
  sampled as if uniform and reported as FAILED_ROW; the engine fails that sequence alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from steadytune.model.decode.transfer import to_device

GREEDY_BELOW = 1e-5   # vLLM's _SAMPLING_EPS: a temperature under it is greedy
FAILED_ROW = -1       # the token id sample_tokens gives a row whose logits are not finite


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: tuple[str, ...] = ()                  # stop strings: the answer ends before the first one
    stop_token_ids: frozenset = field(default_factory=frozenset)  # end-of-turn / eos tokens
    ignore_eos: bool = False                    # generate exactly max_tokens (load tests; vLLM's extension)
    top_k: int = -1                             # the k most likely tokens only; -1 or 0: all (vLLM's extension)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def truncates(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0


def make_generator(params: SamplingParams, device: torch.device) -> Optional[torch.Generator]:
    if params.greedy or params.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(params.seed)


def _truncate(probs: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero each row's tail beyond its top_k tokens, then outside the smallest set of what is left with mass >= top_p
    (measured on what top_k kept, as transformers and vLLM apply them); the top token always stays."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[-1], device=probs.device)
    kept = sorted_probs.masked_fill(ranks[None, :] >= top_k[:, None], 0.0)
    before = (kept.cumsum(dim=-1) - kept) / kept.sum(dim=-1, keepdim=True)  # mass ranked above each token
    drop = before >= top_p[:, None]
    drop[:, 0] = False
    kept = kept.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, kept)


def sample_next(logits: torch.Tensor, params: Sequence[SamplingParams],
                generators: Sequence[Optional[torch.Generator]]) -> list[int]:
    """logits [rows, vocab] -> one token id per row (FAILED_ROW for a row whose logits are not finite)."""
    return sample_tokens(logits, params, generators).tolist()


def sample_tokens(logits: torch.Tensor, params: Sequence[SamplingParams],
                  generators: Sequence[Optional[torch.Generator]]) -> torch.Tensor:
    """logits [rows, vocab] -> a LongTensor of one token id per row, on the logits' device (nothing waits for it:
    the batch feeds it to the next step on the device, the engine copies it to the host once). A row whose logits
    hold nan or +inf, or only -inf, gets FAILED_ROW."""
    logits = logits.float()
    top = logits.amax(dim=-1, keepdim=True)          # nan when the row holds a nan
    broken = ~torch.isfinite(top[:, 0])
    chosen = logits.argmax(dim=-1)
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    if sampled:
        device = logits.device
        vocab = logits.shape[-1]
        index = to_device(sampled, torch.long, device)
        temperature = to_device([params[i].temperature for i in sampled], torch.float32, device)
        scaled = (logits[index] - top[index]) / temperature[:, None]
        scaled = scaled.masked_fill(broken[index, None], 0.0)  # a broken row draws from a uniform, then is dropped
        probs = torch.softmax(scaled, dim=-1)
        if any(params[i].truncates for i in sampled):
            top_k = to_device([params[i].top_k if 0 < params[i].top_k < vocab else vocab for i in sampled],
                              torch.long, device)
            top_p = to_device([params[i].top_p for i in sampled], torch.float32, device)
            probs = _truncate(probs, top_k, top_p)
        unseeded = [k for k, i in enumerate(sampled) if generators[i] is None]
        picks = torch.empty(len(sampled), dtype=torch.long, device=device)
        if len(unseeded) == len(sampled):
            picks = torch.multinomial(probs, 1).squeeze(1)
        elif unseeded:
            rows = to_device(unseeded, torch.long, device)
            picks[rows] = torch.multinomial(probs[rows], 1).squeeze(1)
        for k, i in enumerate(sampled):
            if generators[i] is not None:
                picks[k] = torch.multinomial(probs[k], 1, generator=generators[i])[0]
        chosen[index] = picks
    return chosen.masked_fill(broken, FAILED_ROW)



# --- keyed sampling: each row's draws depend on its key and position only ----------------------------------------

_MASK = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


_M1, _M2, _GOLDEN = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB), _signed(0x9E3779B97F4A7C15)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (multiplication wraps; shifts made logical by masking)."""
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * _M1
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * _M2
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def mix_key(*parts: int) -> int:
    """One 64-bit key (a signed int, for a torch.long) from integers: a seed, a step, an example's index, ..."""
    x = 0
    for part in parts:
        x = (x ^ _mix_int(int(part) & _MASK)) + 0x9E3779B97F4A7C15
        x = _mix_int(x & _MASK)
    return _signed(x)


def _mix_int(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def keyed_uniform(keys: torch.Tensor, position: int, vocab: int) -> torch.Tensor:
    """[rows, vocab] uniforms in (0, 1), a pure function of (each row's key, the position, the token id): the same
    numbers for a row whatever else is in the batch, on any device."""
    base = _mix(keys ^ _mix(torch.full_like(keys, _signed((position + 1) * _GOLDEN))))
    x = _mix(base[:, None] + torch.arange(vocab, device=keys.device, dtype=torch.long)[None, :] * _GOLDEN)
    return (((x >> 40) & ((1 << 24) - 1)).float() + 0.5) * (1.0 / (1 << 24))


def sample_keyed(logits: torch.Tensor, params: SamplingParams, keys: torch.Tensor, position: int) -> torch.Tensor:
    """logits [rows, vocab] -> one token id per row, every row with the same `params`, drawn by inverting the row's
    cumulative distribution at one uniform keyed by (row key, position) (keyed_uniform): a row's completion depends
    on its key, the weights and its own tokens only, not on the batch it was generated in, so it is the same on one
    process or several, and in a resumed run. Scaled and truncated as `sample_tokens` does; a row whose logits are
    not finite draws from a uniform (the loss on it is not finite either, which the guard catches)."""
    logits = logits.float()
    if params.greedy:
        return logits.argmax(dim=-1)
    top = logits.amax(dim=-1, keepdim=True)
    scaled = ((logits - top) / params.temperature).masked_fill(~torch.isfinite(top), 0.0)
    probs = torch.softmax(scaled, dim=-1)
    rows, vocab = probs.shape
    if params.truncates:
        probs = _truncate(probs, torch.full((rows,), params.top_k if 0 < params.top_k < vocab else vocab,
                                            device=probs.device),
                          torch.full((rows,), params.top_p, dtype=torch.float32, device=probs.device))
    cumulative = probs.cumsum(dim=-1)
    u = keyed_uniform(keys, position, 1) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, u, right=True).squeeze(1).clamp_(max=vocab - 1)
