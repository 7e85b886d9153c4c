"""The running batch: sequences that share one forward pass per decode step.

New rows are prefilled together (left-padded to their longest prompt, on a transformers DynamicCache, exactly as
`generate` runs a padded batch) and their keys and values are copied into free slots of the batch's slot cache
(slotcache.py), where row i lives in slot i with its tokens at columns 0..length-1. A decode step then reads
everything that changes from tensors on the device: the rows' next input ids (the sampled tokens, copied there
on the device by `feed`), their lengths (= positions; advanced on the device), the attention masks (built from the
lengths on the device). Nothing is re-laid out, created on the host or copied from it on a step where no row
joins or leaves; the host waits once per step, for the sampled ids it must turn into text (engine.py).

That makes the step the same kernels on the same memory every time, for a given shape bucket (rows rounded up to a
power of two, columns to a multiple of 256): on a GPU it is recorded once per bucket as a CUDA graph and replayed
(graphs.py), which removes the per-kernel launch cost that dominates a small model's step. Rows beyond the live
ones in a bucket are idle slots (length 0, pad token): computed and ignored.

Rows leave between steps: later rows move down into the freed slots (only the rows that move, only the columns
they use). Models whose cache layers the slot cache does not know (linear attention, ...) get the DynamicCache
batch of batch_dynamic.py instead (complete.py's `make_decode_batch` chooses).
"""

from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch
from transformers import DynamicCache

from steadytune.model.decode import slotcache
from steadytune.model.decode.adapters import AdapterSelector
from steadytune.model.decode.graphs import DecodeGraphs, bucket_columns, bucket_rows
from steadytune.model.decode.prefill import Row, cache_keyword, prefill
from steadytune.model.decode.transfer import to_device

KEEP_COLUMNS = 2048  # an emptied batch keeps a cache of up to this many columns for the next requests


class DecodeBatch:
    def __init__(self, model: torch.nn.Module, pad_token_id: int, max_rows: Optional[int] = None,
                 graph_backend=None):
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.max_rows = max_rows
        self.kinds = slotcache.attention_kinds(model)
        if self.kinds is None:
            raise ValueError("this model's cache layers do not fit the slot cache; use make_decode_batch")
        self.window = getattr(slotcache.text_config(model), "sliding_window", None)
        self.additive_masks = slotcache.additive_mask_dtype(model)   # eager attention adds its mask (gpt-oss)
        self.adapters = AdapterSelector(model)
        self.graphs = DecodeGraphs(self.device, graph_backend)
        self.rows: list[Row] = []
        self.cache: Optional[slotcache.SlotCache] = None
        self.lengths: Optional[torch.Tensor] = None   # [slots] tokens in each slot's cache; 0 for idle slots
        self.next_ids: Optional[torch.Tensor] = None  # [slots, 1] each slot's next input token
        self.columns: Optional[torch.Tensor] = None   # arange(capacity), for the masks
        self.longest = 0                              # the longest row's length (host bookkeeping, no sync)
        self.relayouts = 0                            # cache copies for joins, leaves and growth (tests, profiles)
        self._fed = (0, 0)                            # slots whose next token `feed` sets: (first, count)
        self._keyword = cache_keyword(model)

    def __len__(self) -> int:
        return len(self.rows)

    def can_admit(self) -> bool:
        return True  # every supported model's rows can join a running batch

    # --- steps ------------------------------------------------------------------------------------------
    def prefill(self, rows: list[Row]) -> torch.Tensor:
        """Run the prompts of `rows` and join them to the batch; -> their next-token logits [len(rows), vocab]."""
        _, arguments = self.adapters.arguments([r.adapter for r in rows])
        logits, cache, _, width = prefill(self.model, rows, self.pad_token_id, self.device, arguments, self._keyword)
        first = len(self.rows)
        self._reserve(cache, first + len(rows), max(width, self.longest) + 1)
        lengths = to_device([r.length for r in rows], torch.long, self.device)
        self.cache.store_prefill(cache, first, lengths, width)
        self.lengths[first: first + len(rows)] = lengths
        self.relayouts += 1
        self.rows.extend(rows)
        self.longest = max(self.longest, width)
        self._fed = (first, len(rows))
        return logits

    def decode(self) -> torch.Tensor:
        """Feed every row its next token (set by `feed`); -> next-token logits [rows, vocab]."""
        count = len(self.rows)
        key, arguments = self.adapters.arguments([r.adapter for r in self.rows])
        recorded = key is not None and self.graphs.enabled
        # Recorded steps run on shape buckets (a few graphs serve a whole run); eager ones on the exact shape (on a
        # CPU, attention over padding columns costs as much as over real ones).
        rows = bucket_rows(count, self.cache.slots) if recorded else count
        columns = bucket_columns(self.longest + 1) if recorded else self.longest + 1
        self._reserve(None, rows, columns)
        if recorded:
            logits = self.graphs.run((key, rows, columns), lambda: self._step(rows, columns, {}))
        else:
            logits = self._step(rows, columns, arguments)
        self.lengths[:count] += 1
        for row in self.rows:
            row.length += 1
        self.longest += 1
        self._fed = (0, count)
        return logits[:count]

    def reserve(self, columns: int) -> None:
        """Room for `columns` columns in every slot now (after the first prefill, which sets the cache's layout): a
        caller that knows how far it will decode (a GRPO step: prompt + max_completion_length) grows the cache once
        instead of doubling it, and re-recording the graphs, on the way."""
        self._reserve(None, len(self.rows), columns)

    def feed(self, tokens: torch.Tensor) -> None:
        """The tokens sampled from the last prefill's or decode's logits (a LongTensor on the device, one per row of
        those logits) become those rows' next inputs, without a trip through the host."""
        first, count = self._fed
        self.next_ids[first: first + count, 0] = tokens

    def clear(self, rows: Sequence[int]) -> None:
        """Zero the slots of these rows (rows whose logits were not finite, before they leave), so no later row
        reads their nan keys and values through a masked column."""
        self.cache.clear_slots(to_device(list(rows), torch.long, self.device))
        self.relayouts += 1

    def keep(self, keep: Sequence[int]) -> None:
        """Keep only the rows at these indices (finished and cancelled rows leave); later rows move down into the
        freed slots."""
        count = len(self.rows)
        if len(keep) == count:
            return
        moves = [(old, new) for new, old in enumerate(keep) if old != new]
        if moves:
            source = to_device([m[0] for m in moves], torch.long, self.device)
            target = to_device([m[1] for m in moves], torch.long, self.device)
            self.cache.move_rows(source, target, max(self.rows[m[0]].length for m in moves))
            self.lengths[target] = self.lengths[source]
            self.next_ids[target] = self.next_ids[source]
            self.relayouts += 1
        self.lengths[len(keep): count] = 0      # idle slots: position 0, pad token
        self.next_ids[len(keep): count] = self.pad_token_id
        self.rows = [self.rows[i] for i in keep]
        self.longest = max((r.length for r in self.rows), default=0)
        if not self.rows and self.cache.capacity > KEEP_COLUMNS:
            self._release()  # a long request has passed: give its memory back rather than keep it for the next

    def _release(self) -> None:
        self.cache = self.lengths = self.next_ids = self.columns = None
        self.graphs.clear()

    # --- the step -----------------------------------------------------------------------------------------
    def _step(self, rows: int, columns: int, arguments: dict) -> torch.Tensor:
        """One decode forward over the first `rows` slots and `columns` columns. Reads only device tensors that stay
        in place, and writes only the new column of each slot: running it twice is the same as once (graphs.py
        relies on that)."""
        lengths = self.lengths[:rows]
        self.cache.set_view(slotcache.StepView(rows, columns, lengths, self.cache.capacity))
        masks = slotcache.step_masks(self.kinds, self.window, lengths, self.columns[:columns], self.additive_masks)
        out = self.model(input_ids=self.next_ids[:rows], attention_mask=masks, position_ids=lengths.view(rows, 1),
                         use_cache=True, logits_to_keep=1, **{self._keyword: self.cache}, **arguments)
        return out.logits[:, -1, :].float()

    def _reserve(self, like: Optional[DynamicCache], slots: int, columns: int) -> None:
        """Room for `slots` rows of `columns` columns; capacity doubles when it grows, so growth is rare."""
        if self.cache is None:
            slots = max(slots, self.max_rows or 0)
            capacity = bucket_columns(columns)
            self.cache = slotcache.SlotCache(self.kinds, like, slots, capacity)
            self.lengths = torch.zeros(slots, dtype=torch.long, device=self.device)
            self.next_ids = torch.full((slots, 1), self.pad_token_id, dtype=torch.long, device=self.device)
            self.columns = torch.arange(capacity, device=self.device)
            return
        if slots <= self.cache.slots and columns <= self.cache.capacity:
            return
        slots = max(slots, self.cache.slots) if slots <= self.cache.slots else max(slots, 2 * self.cache.slots)
        capacity = (self.cache.capacity if columns <= self.cache.capacity
                    else max(bucket_columns(columns), 2 * self.cache.capacity))
        self.cache.reserve(slots, capacity)
        grown = slots - self.lengths.shape[0]
        if grown > 0:
            self.lengths = torch.cat([self.lengths, self.lengths.new_zeros(grown)])
            self.next_ids = torch.cat([self.next_ids, self.next_ids.new_full((grown, 1), self.pad_token_id)])
        self.columns = torch.arange(capacity, device=self.device)
        self.relayouts += 1
        self.graphs.clear()  # they read the old buffers

    # --- outside the batch --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def adapter_selected(self, adapter: Optional[str]):
        """For a forward outside the batch (classification): the model with this adapter, or the base alone."""
        self.adapters.select(adapter)
        yield
