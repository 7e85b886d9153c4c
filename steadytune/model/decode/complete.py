"""Prompts -> sampled completions in one batch, on the model as it is (LoRA applied, never merged): what a GRPO
step generates from the policy's current weights.

Each prompt is prefilled once per completion (left-padded, in chunks of at most PREFILL_TOKEN_BUDGET padded tokens)
and every row then decodes one token per step on the decode batch (the slot cache, and on a GPU the CUDA graphs of
batch.py; the DynamicCache batch for models the slot cache does not take). Each row's tokens are drawn from noise
keyed by the row's key and the position (sampling.sample_keyed), so a completion depends on its key, the weights and
its prompt only: not on the batch, the process or the run it was generated in. Nothing goes back to the host during decoding but a check, every CHECK_EVERY steps, whether every row has
stopped; a row that stopped keeps its slot and decodes padding (its tokens are ignored), so the batch keeps its
shape and its recorded graphs to the end.

A `Decoder` keeps its decode batch from one call to the next: the cache and the graphs recorded for a step's shape
are reused by the next step's generation (the graphs read the weights' memory, which the optimizer updates in place).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from steadytune.model.decode import slotcache
from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.batch_dynamic import DynamicDecodeBatch
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.sampling import SamplingParams, sample_keyed

# Padded prompt tokens one prefill forward may take (rows x longest prompt), as the serve engine's budget.
PREFILL_TOKEN_BUDGET = 32768
CHECK_EVERY = 8   # decode steps between two looks at whether every row has stopped (each look waits for the device)


def make_decode_batch(model: torch.nn.Module, pad_token_id: int, max_rows: Optional[int] = None,
                      graph_backend=None):
    """The slot-cache batch where the model's layers allow it, else the DynamicCache batch."""
    if slotcache.attention_kinds(model) is not None:
        return DecodeBatch(model, pad_token_id, max_rows, graph_backend)
    return DynamicDecodeBatch(model, pad_token_id)


@dataclass
class Completions:
    ids: list[list[int]]      # per row: the generated tokens up to and including the first stop token
    truncated: list[bool]     # per row: no stop token within max_new_tokens
    # per row: some token was drawn from logits that were not finite (sample_keyed then draws uniformly, so the row is
    # noise); the caller's loss comes from another forward and stays finite, so only this says the generation broke
    nonfinite: Optional[list[bool]] = None


class Decoder:
    """Generates completions for a list of prompts with one model (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int, graph_backend=None):
        self.model = model
        self.pad_token_id = pad_token_id
        self.batch = make_decode_batch(model, pad_token_id, graph_backend=graph_backend)

    @property
    def adapter(self) -> Optional[str]:
        """The adapter the rows decode with: the model's active one (None is the base model, adapters off)."""
        return getattr(self.model, "active_adapter", None) if hasattr(self.model, "peft_config") else None

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, params: SamplingParams,
                 stop_ids: Sequence[int], keys: Sequence[int]) -> Completions:
        """Complete every prompt once, row i sampled from `keys[i]` (sampling.mix_key; a prompt repeated with other
        keys is sampled several times). The caller sets the model's mode and precision (eval mode, inference,
        autocast: eval.scoring.inference)."""
        batch, device = self.batch, self.batch.device
        n = len(prompts)
        rows = [Row(list(p), self.adapter) for p in prompts]
        tokens = torch.full((n, max_new_tokens), self.pad_token_id, dtype=torch.long, device=device)
        stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
        row_keys = torch.tensor(list(keys), dtype=torch.long, device=device)
        broken = torch.zeros(n, dtype=torch.bool, device=device)   # stays on the device: no sync per step
        start = 0
        try:
            for chunk in _chunks(rows, PREFILL_TOKEN_BUDGET):
                logits = batch.prefill(chunk)
                broken[start:start + len(chunk)] |= ~torch.isfinite(logits).all(dim=-1)
                first = sample_keyed(logits, params, row_keys[start:start + len(chunk)], 0)
                batch.feed(first)
                tokens[start:start + len(chunk), 0] = first
                if start == 0 and isinstance(batch, DecodeBatch):
                    batch.reserve(max(len(p) for p in prompts) + max_new_tokens)
                start += len(chunk)
            done = torch.isin(tokens[:, 0], stops)
            for step in range(1, max_new_tokens):
                if step % CHECK_EVERY == 0 and bool(done.all()):
                    break
                logits = batch.decode()
                broken |= ~torch.isfinite(logits).all(dim=-1) & ~done
                sampled = sample_keyed(logits, params, row_keys, step)
                sampled = sampled.masked_fill(done, self.pad_token_id)
                batch.feed(sampled)
                tokens[:, step] = sampled
                done |= torch.isin(sampled, stops)
        finally:
            batch.keep([])   # every row leaves; the cache (and its graphs) stay for the next call
        completions = _cut(tokens.tolist(), set(stop_ids))
        completions.nonfinite = broken.tolist()
        return completions


def _chunks(rows: list[Row], budget: int) -> list[list[Row]]:
    """Consecutive rows whose padded prefill (rows x longest prompt) stays within `budget` tokens (one row at least)."""
    out, chunk, longest = [], [], 0
    for row in rows:
        width = max(longest, len(row.prompt_ids))
        if chunk and (len(chunk) + 1) * width > budget:
            out.append(chunk)
            chunk, width = [], len(row.prompt_ids)
        chunk.append(row)
        longest = width
    if chunk:
        out.append(chunk)
    return out


def _cut(rows: list[list[int]], stops: set[int]) -> Completions:
    ids, truncated = [], []
    for row in rows:
        end = next((k + 1 for k, token in enumerate(row) if token in stops), None)
        ids.append(row if end is None else row[:end])
        truncated.append(end is None)
    return Completions(ids, truncated)
