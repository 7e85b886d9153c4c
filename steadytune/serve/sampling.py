"""Choosing the next token of each row: greedy at temperature 0, else temperature + nucleus (top_p) sampling,
seeded per sequence when the request gives a seed (so a seeded answer does not depend on what else is in the
batch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from steadytune.serve.transfer import to_device


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: tuple[str, ...] = ()                  # stop strings: the answer ends before the first one
    stop_token_ids: frozenset = field(default_factory=frozenset)  # end-of-turn / eos tokens
    ignore_eos: bool = False                    # generate exactly max_tokens (load tests; vLLM's extension)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def make_generator(params: SamplingParams, device: torch.device) -> Optional[torch.Generator]:
    if params.greedy or params.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(params.seed)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row's distribution outside its smallest set of tokens with mass >= top_p."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs          # mass of the tokens ranked above each one
    sorted_probs = sorted_probs.masked_fill(before >= top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def sample_next(logits: torch.Tensor, params: Sequence[SamplingParams],
                generators: Sequence[Optional[torch.Generator]]) -> list[int]:
    """logits [rows, vocab] -> one token id per row."""
    return sample_tokens(logits, params, generators).tolist()


def sample_tokens(logits: torch.Tensor, params: Sequence[SamplingParams],
                  generators: Sequence[Optional[torch.Generator]]) -> torch.Tensor:
    """logits [rows, vocab] -> a LongTensor of one token id per row, on the logits' device (nothing waits for it:
    the batch feeds it to the next step on the device, the engine copies it to the host once)."""
    chosen = logits.argmax(dim=-1)
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    if sampled:
        device = logits.device
        index = to_device(sampled, torch.long, device)
        temperature = to_device([params[i].temperature for i in sampled], torch.float32, device)
        probs = torch.softmax(logits[index].float() / temperature[:, None], dim=-1)
        if any(params[i].top_p < 1.0 for i in sampled):
            probs = _nucleus(probs, to_device([params[i].top_p for i in sampled], torch.float32, device))
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
    return chosen

