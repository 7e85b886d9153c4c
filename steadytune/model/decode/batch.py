"""The running batch on a slot cache: sequences that share one forward pass per decode step.

New rows are prefilled together (left-padded to their longest prompt, on a transformers DynamicCache, exactly as
`generate` runs a padded batch; rows with the same prompt and adapter, such as the completions of one GRPO prompt, are
prefilled once and share it) and their keys and values are copied into free slots of the batch's slot cache
(slotcache.py), where row i lives in slot i with its tokens at columns 0..length-1. A decode step then reads
everything that changes from tensors on the device (state.py): the rows' next input ids, their lengths (=
positions), their sampling settings; it samples every row and updates it there. Nothing is re-laid out, created on
the host or copied from it on a step where no row joins or leaves, and the host waits for nothing: the sampled tokens
come back every few steps (readback.py).

That makes the step the same kernels on the same memory every time, for a given shape bucket (rows rounded up to a
power of two, columns to a multiple of 256): on a GPU it is recorded once per bucket as a CUDA graph and replayed
(graphs.py), which removes the per-kernel launch cost that dominates a small model's step. Rows beyond the live
ones in a bucket are idle slots (done, length 0, pad token): computed and ignored.

The forward is our own (runner.py: attention over each row's real length, LoRA from banks with an adapter per row,
fused small ops) for the model families it knows, else the model's own forward through peft with the masks built
from the lengths.

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
from steadytune.model.decode.running import RunningBatch
from steadytune.model.decode.sampling import sample_rows
from steadytune.model.decode.state import DecodeState
from steadytune.model.decode.transfer import to_device

KEEP_COLUMNS = 2048  # an emptied batch keeps a cache of up to this many columns for the next requests


class DecodeBatch(RunningBatch):
    def __init__(self, model: torch.nn.Module, pad_token_id: int, max_rows: Optional[int] = None,
                 graph_backend=None, readback_every: Optional[int] = None, runner=None):
        super().__init__(model, pad_token_id, readback_every)
        self.max_rows = max_rows
        self.kinds = slotcache.attention_kinds(model)
        if self.kinds is None:
            raise ValueError("this model's cache layers do not fit the slot cache; use make_decode_batch")
        self.window = getattr(slotcache.text_config(model), "sliding_window", None)
        self.additive_masks = slotcache.additive_mask_dtype(model)   # eager attention adds its mask (gpt-oss)
        self.adapters = AdapterSelector(model)
        self.graphs = DecodeGraphs(self.device, graph_backend)
        self.runner = runner
        self.cache: Optional[slotcache.SlotCache] = None
        self.columns: Optional[torch.Tensor] = None   # arange(capacity), for the masks
        self.longest = 0                              # the longest row's length as the host bounds it (no sync)
        self.prefilled = 0                            # prompts prefilled (shared ones once)
        self._keyword = cache_keyword(model)

    def can_admit(self) -> bool:
        return True  # every supported model's rows can join a running batch

    def adapter_index(self, adapter: Optional[str]) -> int:
        return self.runner.adapter_index(adapter) if self.runner is not None else 0

    def refresh_adapters(self) -> None:
        """Copy the adapters' current weights into our forward's LoRA banks (after an optimizer step); banks rebuilt
        for added adapters make the recorded steps stale, so they are dropped."""
        if self.runner is not None and self.runner.refresh():
            self.graphs.clear()

    # --- joining -------------------------------------------------------------------------------------------
    def add(self, rows: list[Row]) -> None:
        """Prefill `rows` and join them to the batch; their first tokens are sampled on the device."""
        self._check_rows(rows)
        if self.runner is not None and any(r.adapter is not None and r.adapter not in self.runner.names
                                           for r in rows):
            self.refresh_adapters()   # an adapter loaded since the banks were built
        unique, sources = share_prompts(rows)
        _, arguments = self.adapters.arguments([r.adapter for r in unique])
        logits, cache, _, width = prefill(self.model, unique, self.pad_token_id, self.device, arguments,
                                          self._keyword)
        self.prefilled += len(unique)
        first = len(self.rows)
        self._reserve(cache, first + len(rows), max(width, self.longest) + 1)
        if self.state.needs_realloc([r.params for r in rows], logits.shape[-1]):
            self.graphs.clear()  # the tensors they read are about to be replaced
        lengths = to_device([r.length for r in rows], torch.long, self.device)
        index = None if len(unique) == len(rows) else to_device(sources, torch.long, self.device)
        self.cache.store_prefill(cache, first, lengths, width, index)
        self._admit_state(first, rows, logits.shape[-1])
        self.state.lengths[first: first + len(rows)] = lengths
        if self.runner is not None:
            self.runner.prepare(self.cache)
        self.state.advance(logits if index is None else logits.index_select(0, index), first,
                           max(r.params.kind for r in rows), fed=False, sampler=self._sampler())
        self.relayouts += 1
        self.rows.extend(rows)
        self.longest = max(self.longest, width)
        self._issue()  # the first tokens go back at once: a client waits for its first token

    # --- the step -------------------------------------------------------------------------------------------
    def step(self) -> None:
        """One decode step for every row (see the module docstring); nothing here waits for the device."""
        count = len(self.rows)
        kind = self.sampler_kind()
        if self.runner is not None:
            key, arguments = "runner", {}
        else:
            key, arguments = self.adapters.arguments([r.adapter for r in self.rows])
        recorded = key is not None and self.graphs.enabled
        # Recorded steps run on shape buckets (a few graphs serve a whole run); eager ones on the exact shape (on a
        # CPU, attention over padding columns costs as much as over real ones).
        rows = bucket_rows(count, self.cache.slots) if recorded else count
        columns = bucket_columns(self.longest + 1) if recorded else self.longest + 1
        self._reserve(None, rows, columns)

        def step() -> torch.Tensor:
            return self._step(rows, columns, arguments, kind)
        if recorded:
            self.graphs.run((key, rows, columns, kind), step, self._snapshot)
        else:
            step()
        self._stepped()
        self.longest = max(r.length for r in self.rows)

    def _step(self, rows: int, columns: int, arguments: dict, kind: int) -> torch.Tensor:
        """Forward, sample and update the first `rows` slots over the first `columns` columns -> the logits. Reads
        only device tensors that stay in place (graphs.py relies on that)."""
        if self.runner is not None:
            logits = self.runner.forward(self.state, self.cache, rows, columns)
        else:
            logits = self._model_forward(rows, columns, arguments)
        self.state.advance(logits, 0, kind, fed=True, sampler=self._sampler())
        return logits

    def _sampler(self):
        """The runner's sampler (a Triton kernel on a GPU) or the torch one."""
        sampler = self.runner.sampler if self.runner is not None else None
        return sampler or sample_rows

    def _model_forward(self, rows: int, columns: int, arguments: dict) -> torch.Tensor:
        """The model's own forward (through peft) on the slot cache, with masks built from the lengths."""
        lengths = self.state.lengths[:rows]
        self.cache.set_view(slotcache.StepView(rows, columns, lengths, self.cache.capacity))
        masks = slotcache.step_masks(self.kinds, self.window, lengths, self.columns[:columns], self.additive_masks)
        out = self.model(input_ids=self.state.next_ids[:rows], attention_mask=masks,
                         position_ids=lengths.view(rows, 1), use_cache=True, logits_to_keep=1,
                         **{self._keyword: self.cache}, **arguments)
        return out.logits[:, -1, :].float()

    def _snapshot(self):
        saved = self.state.snapshot()
        return lambda: self.state.restore(saved)

    # --- leaving ----------------------------------------------------------------------------------------------
    def reserve(self, columns: int) -> None:
        """Room for `columns` columns in every slot now (after the first prefill, which sets the cache's layout): a
        caller that knows how far it will decode (a GRPO step: prompt + max_completion_length) grows the cache once
        instead of doubling it, and re-recording the graphs, on the way."""
        self._reserve(None, len(self.rows), columns)

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
            self.cache.move_rows(source, target, max(self.rows[m[0]].length for m in moves) + 1)
            self.relayouts += 1
        self.state.keep(keep, count)
        self.rows = [self.rows[i] for i in keep]
        self.longest = max((r.length for r in self.rows), default=0)
        if not self.rows and self.cache.capacity > KEEP_COLUMNS:
            self._release()  # a long request has passed: give its memory back rather than keep it for the next

    def _release(self) -> None:
        self.cache = self.state = self.columns = None
        self.graphs.clear()

    def _reserve(self, like: Optional[DynamicCache], slots: int, columns: int) -> None:
        """Room for `slots` rows of `columns` columns; capacity doubles when it grows, so growth is rare."""
        if self.cache is None:
            slots = max(slots, self.max_rows or 0)
            capacity = bucket_columns(columns)
            self.cache = slotcache.SlotCache(self.kinds, like, slots, capacity)
            self.state = DecodeState(slots, self.pad_token_id, self.device)
            self.columns = torch.arange(capacity, device=self.device)
            self.graphs.clear()
            return
        if slots <= self.cache.slots and columns <= self.cache.capacity:
            return
        slots = max(slots, self.cache.slots) if slots <= self.cache.slots else max(slots, 2 * self.cache.slots)
        capacity = (self.cache.capacity if columns <= self.cache.capacity
                    else max(bucket_columns(columns), 2 * self.cache.capacity))
        self.cache.reserve(slots, capacity)
        self.state.grow(slots)
        self.columns = torch.arange(capacity, device=self.device)
        self.relayouts += 1
        self.graphs.clear()  # they read the old buffers

    # --- outside the batch --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def adapter_selected(self, adapter: Optional[str]):
        """For a forward outside the batch (classification): the model with this adapter, or the base alone."""
        self.adapters.select(adapter)
        yield


def share_prompts(rows: Sequence[Row]) -> tuple[list[Row], list[int]]:
    """Rows with the same prompt and adapter share one prefill: -> (the rows to prefill, for each row the index of
    the one whose prefill it takes)."""
    first: dict = {}
    unique, sources = [], []
    for row in rows:
        key = (tuple(row.prompt_ids), row.adapter)
        if key not in first:
            first[key] = len(unique)
            unique.append(row)
        sources.append(first[key])
    return unique, sources
