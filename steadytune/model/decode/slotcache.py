"""A KV cache of fixed slots for the running batch: one preallocated buffer [slots, kv heads, capacity, head dim]
per layer, where row i of the batch lives in slot i and keeps its own tokens at columns 0..length-1 (each row's
position is its own length, so no row is padded for another's sake).

Why not transformers' DynamicCache: it concatenates every layer's keys and values at every step (a new tensor and
a copy of the whole cache per layer per token), and joining or dropping rows re-lays every layer out. Here a
decode step writes one column per row in place (`scatter_` at each row's length, read from a tensor on the device),
so nothing in a step depends on Python values but the batch's shape bucket: a step is the same sequence of kernels
on the same memory every time, which is what a CUDA graph replays (graphs.py). Rows join by copying a prefill's
cache into free slots and leave by moving later rows down; neither happens on a step where the batch is unchanged.

Sliding-window layers (Gemma 3) are stored at full length like the others and get their window from the
attention mask (key position > query position - window, transformers' `sliding_window_overlay`), so every layer
shares one layout; the cost is memory for positions older than the window, bounded by the capacity the batch
reaches. Models whose layers are anything else (linear attention, chunked attention, ...) are not `supported`:
the engine then uses the DynamicCache batch (batch_dynamic.py).
"""

from __future__ import annotations

from typing import Optional

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

FULL, SLIDING = "full_attention", "sliding_attention"


def text_config(model: torch.nn.Module):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def attention_kinds(model: torch.nn.Module) -> Optional[list[str]]:
    """Each layer's attention kind (FULL or SLIDING), or None if some layer is of a kind this cache does not know.

    Models that list `layer_types` (Qwen2/3, Gemma 2/3, ...) take a {kind: mask} dict; models without it are
    supported when they have no sliding window at all (Llama, Gemma 1, ...): Mistral-style models that slide
    every layer build their mask differently and stay on the DynamicCache batch."""
    config = text_config(model)
    kinds = getattr(config, "layer_types", None)
    if kinds:
        kinds = list(kinds)[: config.num_hidden_layers]
        return kinds if set(kinds) <= {FULL, SLIDING} else None
    if getattr(config, "sliding_window", None) is not None:
        return None
    return [FULL] * config.num_hidden_layers


class StepView:
    """What one decode step writes and reads: the first `rows` slots, the first `length` columns, and where each
    row writes its new key/value (computed from a view of the batch's lengths tensor, so a replayed graph reads the
    current values)."""

    def __init__(self, rows: int, length: int, lengths: torch.Tensor, capacity: int):
        self.rows, self.length = rows, length
        self._lengths, self._capacity = lengths, capacity
        self._targets: dict[int, torch.Tensor] = {}

    def targets(self, heads: int) -> torch.Tensor:
        """Row-major indices of each (row, head)'s new column in a buffer viewed as [slots * heads * capacity, dim]:
        index_copy_ writes them all with one kernel (a scatter along the column axis is several times slower)."""
        if heads not in self._targets:
            first = torch.arange(self.rows * heads, device=self._lengths.device).view(self.rows, heads)
            self._targets[heads] = (first * self._capacity + self._lengths.view(-1, 1)).view(-1)
        return self._targets[heads]


class SlotLayer(CacheLayerMixin):
    """One layer's buffers; `update` writes the step's single new column per row in place."""

    is_compileable = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, sliding: bool):
        super().__init__()
        self.keys, self.values = keys, values
        self.is_sliding = sliding
        self.is_initialized = True
        self.view: Optional[StepView] = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # allocated by SlotCache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        view = self.view
        rows, heads = key_states.shape[0], key_states.shape[1]
        if key_states.shape[-2] != 1 or rows != view.rows:
            raise ValueError("the slot cache takes one new token per row of its step (prefill runs on a DynamicCache)")
        targets = view.targets(heads)
        for buffer, states in ((self.keys, key_states), (self.values, value_states)):
            buffer.view(-1, buffer.shape[-1]).index_copy_(0, targets, states.reshape(rows * heads, -1))
        return self.keys[:rows, :, : view.length], self.values[:rows, :, : view.length]

    def get_seq_length(self) -> int:
        return self.view.length if self.view is not None else 0

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        raise NotImplementedError("the batch passes its own masks; the slot cache does not build them")

    def get_max_length(self) -> int:
        return self.keys.shape[-2]


class SlotCache(Cache):
    """The layers' buffers, allocated from the first prefill's cache (its dtypes, heads and head dims), and grown by
    reallocation (`reserve`) when the batch needs more slots or columns."""

    def __init__(self, kinds: list[str], like: Cache, slots: int, capacity: int):
        layers = []
        for kind, source in zip(kinds, like.layers):
            keys = source.keys.new_zeros(slots, source.keys.shape[1], capacity, source.keys.shape[3])
            values = source.values.new_zeros(slots, source.values.shape[1], capacity, source.values.shape[3])
            layers.append(SlotLayer(keys, values, kind == SLIDING))
        super().__init__(layers=layers)

    @property
    def slots(self) -> int:
        return self.layers[0].keys.shape[0]

    @property
    def capacity(self) -> int:
        return self.layers[0].keys.shape[2]

    def reserve(self, slots: int, capacity: int) -> bool:
        """Make room for `slots` rows of `capacity` columns (keeping what is stored); -> whether buffers moved."""
        if slots <= self.slots and capacity <= self.capacity:
            return False
        slots, capacity = max(slots, self.slots), max(capacity, self.capacity)
        for layer in self.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                new = old.new_zeros(slots, old.shape[1], capacity, old.shape[3])
                new[: old.shape[0], :, : old.shape[2]] = old
                setattr(layer, name, new)
        return True

    def set_view(self, view: Optional[StepView]) -> None:
        for layer in self.layers:
            layer.view = view

    def store_prefill(self, prefill: Cache, first_slot: int, lengths: torch.Tensor, width: int,
                      sources: Optional[torch.Tensor] = None) -> None:
        """Copy a left-padded prefill's keys and values (rows of true lengths `lengths`, a LongTensor on the device,
        padded to `width`) into slots first_slot.. so that each row's token t sits at column t. `sources` (a
        LongTensor, one per slot filled) names the prefill row each slot copies: several slots may copy one row (the
        completions of one prompt share its prefill); by default slot i copies row i.

        A prefill layer holds the last `stored` columns of the padded width (all of them, or sliding_window - 1 for a
        sliding layer); row i's token t is at column t + stored - lengths[i] there. Columns a row does not have
        (beyond its length, or older than a sliding layer kept) are filled with copies of stored values: finite,
        and hidden by the mask."""
        rows = lengths.shape[0]
        columns = torch.arange(width, device=lengths.device)
        indices: dict[int, torch.Tensor] = {}
        for layer, source in zip(self.layers, prefill.layers):
            stored = source.keys.shape[2]
            if stored not in indices:
                indices[stored] = (columns[None, :] + stored - lengths[:, None]).clamp_(0, stored - 1)
            index = indices[stored].view(rows, 1, width, 1)
            for target, states in ((layer.keys, source.keys), (layer.values, source.values)):
                if sources is not None:
                    states = states.index_select(0, sources)
                shape = (rows, states.shape[1], width, states.shape[3])
                target[first_slot: first_slot + rows, :, :width] = states.gather(2, index.expand(shape))

    def clear_slots(self, slots: torch.Tensor) -> None:
        """Zero every column of these slots (a LongTensor): a row whose numbers broke may have left nan there, and a
        masked column still meets the attention weights as 0 x value, which is nan for a nan value."""
        for layer in self.layers:
            for buffer in (layer.keys, layer.values):
                buffer[slots] = 0

    def move_rows(self, source: torch.Tensor, target: torch.Tensor, columns: int) -> None:
        """Slots `source` -> slots `target` (LongTensors), the first `columns` columns."""
        for layer in self.layers:
            for buffer in (layer.keys, layer.values):
                buffer[target, :, :columns] = buffer[source, :, :columns]


def additive_mask_dtype(model: torch.nn.Module) -> Optional[torch.dtype]:
    """The dtype of the additive masks eager attention takes (it adds the mask to the scores: a bool mask would add
    0 and 1), or None where the attention takes bool masks (SDPA, ...). gpt-oss runs only eagerly (its sinks)."""
    if getattr(text_config(model), "_attn_implementation", None) != "eager":
        return None
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def step_masks(kinds: list[str], window: Optional[int], lengths: torch.Tensor, columns: torch.Tensor,
               additive: Optional[torch.dtype] = None):
    """The decode step's attention masks from each row's length (= the position of its new token): a row sees its
    columns 0..length; a sliding layer only those > length - window. -> the mask argument the model takes: one
    [rows, 1, 1, columns] bool tensor, or {kind: mask} when the model mixes kinds; with `additive` a dtype, masks of
    that dtype holding 0 where a row sees and its lowest value where it does not (eager attention's form)."""
    position = lengths.view(-1, 1)
    seen = columns.view(1, -1) <= position
    masks = {FULL: seen[:, None, None, :]}
    if SLIDING in kinds:
        masks[SLIDING] = (seen & (columns.view(1, -1) > position - window))[:, None, None, :]
    if additive is not None:
        lowest = torch.finfo(additive).min
        masks = {kind: torch.zeros((), dtype=additive, device=m.device).masked_fill(~m, lowest)
                 for kind, m in masks.items()}
    if len(set(kinds)) == 1 and kinds[0] == FULL:
        return masks[FULL]
    return masks
