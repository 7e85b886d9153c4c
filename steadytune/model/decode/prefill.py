"""What both decode batches share: a row of the running batch, and the prefill of new rows (left-padded to their
longest prompt on a transformers DynamicCache, exactly as `generate` runs a padded batch)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from transformers import DynamicCache

from steadytune.model.decode.sampling import SamplingParams


@dataclass
class Row:
    """One sequence in the batch: its prompt, adapter (None: the base model), sampling settings and key (the noise it
    draws from: sampling.py), and what its owner (a serve request, a GRPO roll-out) wants to find again.

    The host's view of it, kept without waiting for the device: `steps` decode steps ran since it joined; `length`
    is at most that many tokens beyond its prompt (it stops growing once the row is done on the device): the cache
    columns it may need; `received` tokens of it were read back; `finished` is why it ended, once a read-back says so
    ("stop", "length" or "failed")."""
    prompt_ids: Sequence[int]
    adapter: Optional[str]
    owner: Any = None
    params: Optional[SamplingParams] = None
    key: int = 0
    length: int = 0
    steps: int = 0
    received: int = 0
    finished: Optional[str] = None

    @property
    def may_run(self) -> bool:
        """Whether the device may still be producing tokens for this row (as far as the host knows)."""
        return self.finished is None and 1 + self.steps < self.params.max_tokens

    def stepped(self) -> None:
        if self.may_run:
            self.length += 1
        self.steps += 1


def cache_keyword(model: torch.nn.Module) -> str:
    """transformers 5.24 renamed the forward's `past_key_values` to `cache` (the old name warns until 5.40)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def prefill(model: torch.nn.Module, rows: Sequence[Row], pad_token_id: int, device: torch.device,
            adapter_arguments: dict, keyword: str) -> tuple[torch.Tensor, DynamicCache, torch.Tensor, int]:
    """Run the prompts of `rows` left-padded to their longest -> (next-token logits [rows, vocab], their cache,
    the 2D padding mask, the padded width). Sets each row's length."""
    width = max(len(r.prompt_ids) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.prompt_ids)
        ids[i, width - n:] = torch.as_tensor(list(row.prompt_ids), dtype=torch.long)
        mask[i, width - n:] = 1
        row.length = n
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                **{keyword: cache}, **adapter_arguments)
    return out.logits[:, -1, :].float(), cache, mask, width
