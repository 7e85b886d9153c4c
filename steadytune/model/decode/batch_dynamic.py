"""The running batch on transformers' DynamicCache, for models the slot cache (batch.py) does not take.

Rows are left-padded to a common length so every row's next token sits in the last column; one DynamicCache holds
them all (`kvcache.py`). New rows are prefilled in a forward of their own and joined below the running ones
between steps; finished rows leave between steps and the padding they leave behind is trimmed. If the cache's
layers cannot be joined (`kvcache.can_join`), new rows wait until the batch is empty. Same interface as
batch.DecodeBatch.
"""

from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch
from transformers import DynamicCache

from steadytune.model.decode import kvcache
from steadytune.model.decode.adapters import AdapterSelector
from steadytune.model.decode.prefill import Row, cache_keyword, prefill


class DynamicDecodeBatch:
    def __init__(self, model: torch.nn.Module, pad_token_id: int):
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.adapters = AdapterSelector(model)
        self.rows: list[Row] = []
        self.cache: Optional[DynamicCache] = None
        self.mask: Optional[torch.Tensor] = None       # [rows, padded length], 1 = real token
        self.next_ids: Optional[torch.Tensor] = None   # [rows, 1] on the device
        self.joinable: Optional[bool] = None           # known after the first prefill
        self.relayouts = 0
        self._fed = (0, 0)
        self._keyword = cache_keyword(model)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def can_admit(self) -> bool:
        """Whether new rows may join now: always into an empty batch, into a running one if its cache joins."""
        return not self.rows or bool(self.joinable)

    def prefill(self, rows: list[Row]) -> torch.Tensor:
        _, arguments = self.adapters.arguments([r.adapter for r in rows])
        logits, cache, mask, width = prefill(self.model, rows, self.pad_token_id, self.device, arguments,
                                             self._keyword)
        if self.joinable is None:
            self.joinable = kvcache.can_join(cache)
        pending = torch.full((len(rows), 1), self.pad_token_id, dtype=torch.long, device=self.device)
        if not self.rows:
            self.cache, self.mask, self.next_ids = cache, mask, pending
        else:
            total = kvcache.join(self.cache, self.width, cache, width)
            self.mask = torch.cat([_pad_mask(self.mask, total), _pad_mask(mask, total)])
            self.next_ids = torch.cat([self.next_ids, pending])
            self.relayouts += 1
        self._fed = (len(self.rows), len(rows))
        self.rows.extend(rows)
        return logits

    def decode(self) -> torch.Tensor:
        positions = torch.tensor([[r.length] for r in self.rows], dtype=torch.long, device=self.device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
        _, arguments = self.adapters.arguments([r.adapter for r in self.rows])
        out = self.model(input_ids=self.next_ids, attention_mask=self.mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self._keyword: self.cache}, **arguments)
        for row in self.rows:
            row.length += 1
        self._fed = (0, len(self.rows))
        return out.logits[:, -1, :].float()

    def feed(self, tokens: torch.Tensor) -> None:
        first, count = self._fed
        self.next_ids[first: first + count, 0] = tokens

    def clear(self, rows: Sequence[int]) -> None:
        """Nothing to do: rows that leave take their cache rows with them (DecodeBatch.clear says why it matters)."""

    def keep(self, keep: Sequence[int]) -> None:
        """Keep only the rows at these indices (finished and cancelled rows leave), and trim padding."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.rows, self.cache, self.mask, self.next_ids = [], None, None, None
            return
        index = torch.tensor(list(keep), dtype=torch.long, device=self.device)
        self.rows = [self.rows[i] for i in keep]
        kvcache.select_rows(self.cache, index)
        self.mask, self.next_ids = self.mask[index], self.next_ids[index]
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
