"""Prompts -> sampled completions in one batch, on the model as it is (LoRA applied, never merged): what a GRPO
step generates from the policy's current weights.

Rows with the same prompt (a GRPO group's completions) share one prefill (batch.share_prompts); prompts are prefilled
in chunks of at most PREFILL_TOKEN_BUDGET padded tokens, and every row then decodes one token per step on the decode
batch (the slot cache and our own forward, recorded as a CUDA graph on a GPU; the DynamicCache batch for models the
slot cache does not take). Each row's tokens are drawn from noise keyed by the row's key and the position
(sampling.py), so a completion depends on its key, the weights and its prompt only: not on the batch, the process or
the run it was generated in. The device stops each row itself (a stop token, the budget) and the host only reads the
tokens back every CHECK_EVERY steps, never once a step; a row that stopped keeps its slot and decodes padding (its
tokens are not counted), so the batch keeps its shape and its recorded graphs to the end.

A `Decoder` keeps its decode batch from one call to the next: the cache and the graphs recorded for a step's shape
are reused by the next step's generation (the graphs read the weights' memory, which the optimizer updates in place;
the LoRA banks are refreshed from the adapters at each call).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import torch

from steadytune.model.decode import slotcache
from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.batch_dynamic import DynamicDecodeBatch
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.runner import make_runner
from steadytune.model.decode.sampling import SamplingParams

# Padded prompt tokens one prefill forward may take (rows x longest prompt), as the serve engine's budget.
PREFILL_TOKEN_BUDGET = 32768
CHECK_EVERY = 8   # decode steps between two read-backs of the tokens (each is a copy queued behind the steps)


def make_decode_batch(model: torch.nn.Module, pad_token_id: int, max_rows: Optional[int] = None,
                      graph_backend=None, readback_every: Optional[int] = None, kernels: Optional[str] = None):
    """The slot-cache batch where the model's layers allow it (with our own forward where runner.py knows the model),
    else the DynamicCache batch."""
    if slotcache.attention_kinds(model) is not None:
        return DecodeBatch(model, pad_token_id, max_rows, graph_backend, readback_every,
                           runner=make_runner(model, kernels))
    return DynamicDecodeBatch(model, pad_token_id, readback_every)


@dataclass
class Completions:
    ids: list[list[int]]      # per row: the generated tokens up to and including the first stop token
    truncated: list[bool]     # per row: no stop token within max_new_tokens
    # per row: the row's logits were not finite at some step (the row ends there, its tokens are what came before);
    # the caller's loss comes from another forward and stays finite, so only this says the generation broke
    nonfinite: Optional[list[bool]] = None


class Decoder:
    """Generates completions for a list of prompts with one model (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int, graph_backend=None, kernels: Optional[str] = None):
        self.model = model
        self.pad_token_id = pad_token_id
        self.batch = make_decode_batch(model, pad_token_id, graph_backend=graph_backend, readback_every=CHECK_EVERY,
                                       kernels=kernels)

    @property
    def adapter(self) -> Optional[str]:
        """The adapter the rows decode with: the model's active one (None: the base model, or adapters off)."""
        return self.batch.adapters.current()

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, params: SamplingParams,
                 stop_ids: Sequence[int], keys: Sequence[int]) -> Completions:
        """Complete every prompt once, row i sampled from `keys[i]` (sampling.mix_key; a prompt repeated with other
        keys is sampled several times). The caller sets the model's mode and precision (eval mode, inference,
        autocast: eval.scoring.inference)."""
        batch = self.batch
        params = replace(params, max_tokens=max_new_tokens, stop_token_ids=frozenset(stop_ids), ignore_eos=False)
        rows = [Row(list(p), self.adapter, owner=i, params=params, key=k) for i, (p, k) in enumerate(zip(prompts, keys))]
        if isinstance(batch, DecodeBatch):
            batch.refresh_adapters()   # the adapters' weights changed since the last call (an optimizer step)
        tokens: list[list[int]] = [[] for _ in rows]
        try:
            for number, chunk in enumerate(_chunks(rows, PREFILL_TOKEN_BUDGET)):
                batch.add(chunk)
                if number == 0 and isinstance(batch, DecodeBatch):
                    batch.reserve(max(len(p) for p in prompts) + max_new_tokens)
            while True:
                stepping = batch.needs_step()
                if stepping:
                    batch.step()
                for update in batch.poll(wait=not stepping):
                    tokens[update.row.owner].extend(update.tokens)
                if not stepping:
                    break
        finally:
            batch.keep([])   # every row leaves; the cache (and its graphs) stay for the next call
        return Completions(tokens, [r.finished != "stop" for r in rows], [r.finished == "failed" for r in rows])


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
