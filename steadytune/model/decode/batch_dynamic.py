"""The running batch on transformers' DynamicCache, for models the slot cache (batch.py) does not take.

Rows are left-padded to a common length so every row's next token sits in the last column; one DynamicCache holds
them all (`kvcache.py`). New rows are prefilled in a forward of their own and joined below the running ones
between steps; finished rows leave between steps and the padding they leave behind is trimmed. If the cache's
layers cannot be joined (`kvcache.can_join`), new rows wait until the batch is empty. Same interface as
batch.DecodeBatch (running.py), the same decode state and sampling on the device; its step is never recorded (the
cache grows by a column every step) and its positions come from the host's count of each row's columns.
"""

from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch
from transformers import DynamicCache

from steadytune.model.decode import kvcache
from steadytune.model.decode.adapters import AdapterSelector
from steadytune.model.decode.prefill import Row, cache_keyword, prefill
from steadytune.model.decode.running import RunningBatch
from steadytune.model.decode.state import DecodeState


class DynamicDecodeBatch(RunningBatch):
    def __init__(self, model: torch.nn.Module, pad_token_id: int, readback_every: Optional[int] = None):
        super().__init__(model, pad_token_id, readback_every)
        self.adapters = AdapterSelector(model)
        self.cache: Optional[DynamicCache] = None
        self.mask: Optional[torch.Tensor] = None       # [rows, padded length], 1 = real token
        self.joinable: Optional[bool] = None           # known after the first prefill
        self._keyword = cache_keyword(model)

    @property
    def width(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def can_admit(self) -> bool:
        """Whether new rows may join now: always into an empty batch, into a running one if its cache joins."""
        return not self.rows or bool(self.joinable)

    def add(self, rows: list[Row]) -> None:
        self._check_rows(rows)
        _, arguments = self.adapters.arguments([r.adapter for r in rows])
        logits, cache, mask, width = prefill(self.model, rows, self.pad_token_id, self.device, arguments,
                                             self._keyword)
        if self.joinable is None:
            self.joinable = kvcache.can_join(cache)
        first = len(self.rows)
        if self.state is None:
            self.state = DecodeState(len(rows), self.pad_token_id, self.device)
        self.state.grow(first + len(rows))
        if not self.rows:
            self.cache, self.mask = cache, mask
        else:
            total = kvcache.join(self.cache, self.width, cache, width)
            self.mask = torch.cat([_pad_mask(self.mask, total), _pad_mask(mask, total)])
            self.relayouts += 1
        self._admit_state(first, rows, logits.shape[-1])
        self.state.advance(logits, first, max(r.params.kind for r in rows), fed=False)
        self.rows.extend(rows)
        self._issue()

    def step(self) -> None:
        """One decode step, eagerly (a DynamicCache grows by a column each step: nothing to record)."""
        n = len(self.rows)
        positions = torch.tensor([[r.length] for r in self.rows], dtype=torch.long, device=self.device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(n, 1)], dim=1)
        _, arguments = self.adapters.arguments([r.adapter for r in self.rows])
        out = self.model(input_ids=self.state.next_ids[:n], attention_mask=self.mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **{self._keyword: self.cache}, **arguments)
        self.state.advance(out.logits[:, -1, :].float(), 0, self.sampler_kind(), fed=True)
        for row in self.rows:   # every row's column grows here, done or not: its length is its column count
            row.length += 1
            row.steps += 1
        self._unread += 1
        if self._unread >= self.readback_every:
            self._issue()

    def clear(self, rows: Sequence[int]) -> None:
        """Nothing to do: rows that leave take their cache rows with them (DecodeBatch.clear says why it matters)."""

    def keep(self, keep: Sequence[int]) -> None:
        """Keep only the rows at these indices (finished and cancelled rows leave), and trim padding."""
        count = len(self.rows)
        if len(keep) == count:
            return
        self.state.keep(keep, count)
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
        self.relayouts += 1

    @contextlib.contextmanager
    def adapter_selected(self, adapter: Optional[str]):
        self.adapters.select(adapter)
        yield


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    if mask.shape[1] == width:
        return mask
    return torch.cat([mask.new_zeros(mask.shape[0], width - mask.shape[1]), mask], dim=1)
