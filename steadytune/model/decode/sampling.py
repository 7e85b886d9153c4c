"""Choosing the next token of each row, on the device, inside the recorded decode step: greedy at temperature 0, else
repetition penalty, temperature, top_k, nucleus (top_p) and min_p, as transformers' `generate` applies them, each row
with its own settings (tensors of one value per row, so one recorded step serves any mix of requests).

A sampled row draws by the Gumbel-max trick from noise that is a pure function of (the row's key, the token's index in
its completion, the token id): `token = argmax over kept tokens of (logit - max) / t + g`, g = -log(-log u), u from a
32-bit hash (`noise_bits`). So a row's draws depend on its key, the weights and its own tokens only: not on the batch
it runs in, the process or the run (GRPO's completions are the same on one process or several, and in a resumed run);
a seeded request is reproducible; nothing reads a torch.Generator (whose state a CUDA graph could not advance), and
the Triton kernel (kernels/sample_triton.py) computes the same bits as the torch code here. u has 24 bits, so a token
whose probability is below about e^-17 of the top one's is never drawn.

No request can make inf or nan here, and no row can break another (issue 25: `temperature: 1e-300` is 0 in float32,
logits / 0 gave nan, and torch.multinomial failed the whole decode step):
- a temperature below GREEDY_BELOW (vLLM's `_SAMPLING_EPS`) is greedy: that is where softmax(logits / t) goes as t
  falls, and it is what vLLM does;
- logits are scaled as (logits - row max) / t: every value is <= 0, the top one exactly 0, so nothing overflows;
- top_k, top_p and min_p always keep the top token (a top_p that rounds to 0 is greedy, a top_k past the vocabulary
  keeps it all);
- a row whose own logits are broken (nan, +inf, or every one -inf: the model's numbers, not the request's) is reported
  as failed (FAILED_ROW in its tokens); the engine fails that sequence alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

GREEDY_BELOW = 1e-5   # vLLM's _SAMPLING_EPS: a temperature under it is greedy
FAILED_ROW = -1       # the token a row gets when its logits are not finite

# How much of the sampler a batch needs, from the cheapest up: a recorded step is recorded per kind.
GREEDY, SAMPLE, TRUNCATE = 0, 1, 2


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
    min_p: float = 0.0                          # tokens at least min_p x the top token's probability (transformers')
    repetition_penalty: float = 1.0             # > 1 discourages tokens of the prompt and the answer so far (CTRL's)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def truncates(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0

    @property
    def kind(self) -> int:
        """GREEDY, SAMPLE (temperature, min_p) or TRUNCATE (top_k or top_p: a sort of the vocabulary)."""
        if self.greedy:
            return GREEDY
        return TRUNCATE if self.truncates else SAMPLE

    @property
    def penalises(self) -> bool:
        return self.repetition_penalty != 1.0

    @property
    def stops(self) -> frozenset:
        """The token ids that end this sequence on the device (none with ignore_eos)."""
        return frozenset() if self.ignore_eos else frozenset(self.stop_token_ids)


# --- keyed noise -------------------------------------------------------------------------------------------------

_MASK = (1 << 64) - 1
M32 = 0xFFFFFFFF
HASH_A, HASH_B = 0x7FEB352D, 0x846CA68B     # the two multipliers of a 32-bit integer hash (Chris Wellons' lowbias32)
WEYL = 0x9E3779B9                           # 2^32 / golden ratio: consecutive tokens far apart before hashing
KEY_HI, POSITION = 0x85EBCA6B, 0xC2B2AE35   # what the key's high half and the position are mixed with


def hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on int64 tensors holding values in [0, 2^32): products wrap in int64 and are masked back to 32 bits,
    shifts are logical because the values are non-negative. The Triton kernel does the same on uint32."""
    x = x ^ (x >> 16)
    x = (x * HASH_A) & M32
    x = x ^ (x >> 15)
    x = (x * HASH_B) & M32
    return x ^ (x >> 16)


def row_seeds(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One 32-bit seed per row (in an int64) from its 64-bit key and the index of the token being drawn."""
    low, high = keys & M32, (keys >> 32) & M32
    seed = hash32(low ^ hash32(high ^ KEY_HI))
    return hash32(seed ^ hash32((positions & M32) ^ POSITION))


def noise_bits(seeds: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, vocab] 32-bit hashes of (row seed, token id)."""
    tokens = torch.arange(vocab, device=seeds.device, dtype=torch.long)
    return hash32((seeds[:, None] + tokens[None, :] * WEYL) & M32)


def uniforms(bits: torch.Tensor) -> torch.Tensor:
    """The top 24 bits as a float32 in (0, 1)."""
    return ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def gumbel(seeds: torch.Tensor, vocab: int) -> torch.Tensor:
    return -torch.log(-torch.log(uniforms(noise_bits(seeds, vocab))))


def keyed_uniform(keys: torch.Tensor, position: int, vocab: int) -> torch.Tensor:
    """[rows, vocab] uniforms in (0, 1), a pure function of (each row's key, the position, the token id)."""
    positions = torch.full_like(keys, position)
    return uniforms(noise_bits(row_seeds(keys, positions), vocab))


def _mix_int(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def mix_key(*parts: int) -> int:
    """One 64-bit key (a signed int, for a torch.long) from integers: a seed, a step, an example's index, ..."""
    x = 0
    for part in parts:
        x = (x ^ _mix_int(int(part) & _MASK)) + 0x9E3779B97F4A7C15
        x = _mix_int(x & _MASK)
    return x - (1 << 64) if x >= 1 << 63 else x


# --- the sampler -------------------------------------------------------------------------------------------------

@dataclass
class RowSettings:
    """Each row's sampling settings as tensors of one value per row (the decode state's, sliced to the step's rows)."""
    temperature: torch.Tensor         # float32; < GREEDY_BELOW: greedy
    top_k: torch.Tensor               # long; <= 0: all
    top_p: torch.Tensor               # float32; >= 1: all
    min_p: torch.Tensor               # float32; <= 0: all
    penalty: torch.Tensor             # float32; 1: none
    keys: torch.Tensor                # long
    positions: torch.Tensor           # long: the index in the completion of the token being drawn


def penalise(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """transformers' RepetitionPenaltyLogitsProcessor per row: a token of the prompt or the answer so far has its
    logit divided by the penalty (multiplied, where it is negative)."""
    penalty = penalty[:, None]
    return torch.where(seen, torch.where(logits < 0, logits * penalty, logits / penalty), logits)


def truncation_keep(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Which tokens top_k and then top_p keep (transformers' order: top_p measured on what top_k kept); the top token
    always stays. One sort of each row."""
    vocab = scaled.shape[-1]
    ordered, order = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=scaled.device)
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    kept = ranks[None, :] < k[:, None]
    probs = torch.softmax(ordered.masked_fill(~kept, -math.inf), dim=-1)
    before = probs.cumsum(dim=-1) - probs       # mass ranked above each token
    drop = (before >= top_p[:, None]) & (top_p[:, None] < 1.0)
    drop[:, 0] = False
    return torch.zeros_like(kept).scatter_(-1, order, kept & ~drop)


def sample_rows(logits: torch.Tensor, settings: RowSettings, kind: int,
                seen: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [rows, vocab] -> (a token per row (long), whether the row's logits were broken (bool)), on the device,
    without waiting for it. `kind` is the most the rows need (GREEDY, SAMPLE, TRUNCATE); `seen` ([rows, vocab] bool,
    the tokens of each row's prompt and answer) is given when some row has a repetition penalty."""
    x = logits.float()
    if seen is not None:
        x = penalise(x, seen, settings.penalty)
    top = x.amax(dim=-1)                         # nan when the row holds a nan
    broken = ~torch.isfinite(top)
    greedy = x.argmax(dim=-1)
    if kind == GREEDY:
        return greedy, broken
    t = settings.temperature.clamp(min=GREEDY_BELOW)
    scaled = ((x - top[:, None]) / t[:, None]).masked_fill(broken[:, None], 0.0)
    floor = torch.where(settings.min_p > 0, settings.min_p.clamp(min=1e-30).log(), torch.full_like(t, -math.inf))
    keep = scaled >= floor[:, None]
    if kind >= TRUNCATE:
        keep &= truncation_keep(scaled, settings.top_k, settings.top_p)
    score = (scaled + gumbel(row_seeds(settings.keys, settings.positions), x.shape[-1])).masked_fill(~keep, -math.inf)
    drawn = score.argmax(dim=-1)
    return torch.where(settings.temperature < GREEDY_BELOW, greedy, drawn), broken


def settings_of(params: Sequence[SamplingParams], keys: Sequence[int], positions: Sequence[int],
                device: torch.device) -> RowSettings:
    """Rows with their own settings, keys and positions, from the host (tests; the decode state keeps its own)."""
    def tensor(values, dtype):
        return torch.tensor(list(values), dtype=dtype, device=device)
    return RowSettings(tensor([p.temperature for p in params], torch.float32),
                       tensor([p.top_k for p in params], torch.long), tensor([p.top_p for p in params], torch.float32),
                       tensor([p.min_p for p in params], torch.float32),
                       tensor([p.repetition_penalty for p in params], torch.float32), tensor(keys, torch.long),
                       tensor(positions, torch.long))


def settings_for(params: SamplingParams, keys: torch.Tensor, position: int) -> RowSettings:
    """Every row with the same settings (GRPO's roll-outs; tests)."""
    rows, device = keys.shape[0], keys.device

    def full(value, dtype):
        return torch.full((rows,), value, dtype=dtype, device=device)
    return RowSettings(full(params.temperature, torch.float32), full(params.top_k, torch.long),
                       full(params.top_p, torch.float32), full(params.min_p, torch.float32),
                       full(params.repetition_penalty, torch.float32), keys, full(position, torch.long))


def sample_keyed(logits: torch.Tensor, params: SamplingParams, keys: torch.Tensor, position: int) -> torch.Tensor:
    """logits [rows, vocab] -> one token id per row, every row with the same `params` (no repetition penalty: that
    needs each row's tokens), drawn with each row's key at this position; FAILED_ROW for a broken row."""
    tokens, broken = sample_rows(logits, settings_for(params, keys, position), params.kind)
    return tokens.masked_fill(broken, FAILED_ROW)
