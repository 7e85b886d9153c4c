"""The running batch: sequences that share one forward pass per decode step.

Rows are left-padded to a common length so every row's next token sits in the last column; one KV cache holds
them all (`kvcache.py`). New rows are prefilled in a forward of their own and joined below the running ones
between steps; finished rows leave between steps and the padding they leave behind is trimmed. Each row may use
a different LoRA adapter: when a step's rows share one adapter it is made the active one (the plain, fastest
forward); otherwise peft's mixed-batch forward (`adapter_names`) applies each row's adapter to its own row.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from transformers import DynamicCache

from steadytune.serve import kvcache

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


@dataclass
class Row:
    """One sequence in the batch. `length` counts its real (unpadded) tokens in the cache; `next_token` is the
    sampled token not yet fed to the model."""
    prompt_ids: Sequence[int]
    adapter: Optional[str]
    owner: Any = None
    length: int = 0
    next_token: Optional[int] = None


class DecodeBatch:
    def __init__(self, model: torch.nn.Module, pad_token_id: int):
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.is_peft = hasattr(model, "peft_config")
        self.rows: list[Row] = []
        self.cache: Optional[DynamicCache] = None
        self.mask: Optional[torch.Tensor] = None    # [rows, padded length], 1 = real token
        self.joinable: Optional[bool] = None         # known after the first prefill
        self._active_adapter: Optional[str] = getattr(model, "active_adapter", None) if self.is_peft else None
        self._cache_keyword = _cache_keyword(model)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def can_admit(self) -> bool:
        """Whether new rows may join now: always into an empty batch, into a running one if its cache joins."""
        return not self.rows or bool(self.joinable)

    # --- steps ------------------------------------------------------------------------------------------
    def prefill(self, rows: list[Row]) -> torch.Tensor:
        """Run the prompts of `rows` and join them to the batch; -> their next-token logits [len(rows), vocab]."""
        width = max(len(r.prompt_ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row.prompt_ids)
            ids[i, width - n:] = torch.as_tensor(list(row.prompt_ids), dtype=torch.long)
            mask[i, width - n:] = 1
            row.length = n
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        logits = self._forward(ids, mask, positions, cache, [r.adapter for r in rows])
        if self.joinable is None:
            self.joinable = kvcache.can_join(cache)
        if not self.rows:
            self.cache, self.mask = cache, mask
        else:
            total = kvcache.join(self.cache, self.width, cache, width)
            self.mask = torch.cat([_pad_mask(self.mask, total), _pad_mask(mask, total)])
        self.rows.extend(rows)
        return logits

    def decode(self) -> torch.Tensor:
        """Feed every row its next token; -> next-token logits [rows, vocab]."""
        ids = torch.tensor([[r.next_token] for r in self.rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[r.length] for r in self.rows], dtype=torch.long, device=self.device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
        logits = self._forward(ids, self.mask, positions, self.cache, [r.adapter for r in self.rows])
        for row in self.rows:
            row.length += 1
        return logits

    def keep(self, keep: Sequence[int]) -> None:
        """Keep only the rows at these indices (finished and cancelled rows leave), and trim padding."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.rows, self.cache, self.mask = [], None, None
            return
        index = torch.tensor(list(keep), dtype=torch.long, device=self.device)
        self.rows = [self.rows[i] for i in keep]
        kvcache.select_rows(self.cache, index)
        self.mask = self.mask[index]
        # Columns that are padding in every row: the width beyond the longest remaining row.
        spare = self.width - max(r.length for r in self.rows)
        if spare > 0:
            kvcache.trim_left(self.cache, spare, self.width)
            self.mask = self.mask[:, spare:]

    # --- the forward --------------------------------------------------------------------------------------
    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: DynamicCache,
                 adapters: Sequence[Optional[str]]) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                         **{self._cache_keyword: cache}, **self._adapter_arguments(adapters))
        return out.logits[:, -1, :].float()

    def _adapter_arguments(self, adapters: Sequence[Optional[str]]) -> dict:
        if not self.is_peft:
            return {}
        names = set(adapters)
        if len(names) == 1 and None not in names:
            self._activate(names.pop())
            return {}
        return {"adapter_names": [a if a is not None else BASE for a in adapters]}

    def _activate(self, name: str) -> None:
        if name != self._active_adapter:
            self.model.set_adapter(name)
            self._active_adapter = name

    @contextlib.contextmanager
    def adapter_selected(self, adapter: Optional[str]):
        """For a forward outside the batch (classification): the model with this adapter, or the base alone."""
        if not self.is_peft:
            yield
        elif adapter is None:
            with self.model.disable_adapter():
                yield
        else:
            self._activate(adapter)
            yield


def _cache_keyword(model: torch.nn.Module) -> str:
    """transformers 5.24 renamed the forward's `past_key_values` to `cache` (the old name warns until 5.40)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    if mask.shape[1] == width:
        return mask
    return torch.cat([mask.new_zeros(mask.shape[0], width - mask.shape[1]), mask], dim=1)
