"""Packing: several tokenised examples per row, attention that never crosses from one example into another.

Why: the plain recipe pads every batch to its longest example and wastes most of the GPU on pad tokens
(alpaca lengths: mean 187, p90 383, max 752). Packing fills rows with real tokens instead.

Correctness rests on three things, all done here:
- position ids restart at 0 for every example, so RoPE sees each example exactly as it would alone;
- attention is confined to each example (block-diagonal causal), by one of the kernels below;
- the first token of every example gets label -100, so the last token of the previous example is never
  trained to predict it (the loss shifts labels by one; see loss.shifted_targets).

Attention kernels (`choose_packing_attention` in hardware/policy.py picks one per backend):
- "varlen": every example of a micro-batch concatenated into one row of shape [1, T], no padding at all, and a
  variable-length flash kernel driven by cumulative sequence lengths (flash-attn's `flash_attn_varlen_func`,
  or PyTorch's own `torch.nn.attention.varlen.varlen_attn`). Registered with transformers as the attention
  implementation "steadytune_varlen".
- "sdpa": rows of at most `row_len` tokens with position ids and *no* 2-D attention mask: transformers then
  finds where position ids restart and builds the block-diagonal causal mask itself (per layer type, so
  sliding-window layers stay correct) and hands it to SDPA. Runs everywhere (CPU, CUDA, ROCm); O(row_len^2)
  per row.
- "flex": rows as above; transformers builds the same document mask as a block-sparse mask for torch's
  flex_attention, which skips the blocks that cross examples.

Batching is by token budget: consecutive examples (in sampler order) are grouped until the budget of real
tokens is reached, so every optimizer step sees about the same number of tokens whatever the lengths. The
same grouping, padded instead of packed, is the unpacked reference: same examples, same order, same steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from steadytune.data.encode import IGNORE_INDEX

PACKING_ATTENTIONS = ("varlen", "sdpa", "flex")


# --- grouping -----------------------------------------------------------------------------------------------

# A long-context budget: from this many tokens a micro-batch, examples of half the budget or more get one of their own
# (group_by_token_budget).
LONG_BUDGET_TOKENS = 32768


def group_by_token_budget(lengths: Sequence[int], order: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive examples of `order` grouped so that each group holds at most `max_tokens` real tokens.

    An example longer than the budget forms a group of its own (it is never split or dropped here: truncation
    to cutoff_len is the tokeniser's job). With a long-context budget (LONG_BUDGET_TOKENS or more), an example of half
    the budget or more also gets a group of its own, and the short examples around it keep filling theirs: a long
    document closing a half-full group of short ones, or taking a few short ones beside it, would leave micro-batches
    of very uneven size and cost (its attention grows with the square of its length, theirs with their own).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    alone_from = max_tokens // 2 if max_tokens >= LONG_BUDGET_TOKENS else None
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index in order:
        n = int(lengths[index])
        if alone_from is not None and n >= alone_from:
            groups.append([index])   # the short examples' group stays open after it
            continue
        if current and used + n > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += n
    if current:
        groups.append(current)
    return groups


def pack_into_rows(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Positions 0..len(lengths)-1 packed into rows of at most `row_len` tokens, first-fit decreasing.

    First-fit decreasing wastes little (rows end nearly full) and is O(n * rows), which is nothing next to a
    training step. Examples longer than `row_len` get a row of their own.
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(max(row_len - n, 0))
    for row in rows:
        row.sort()  # keep the sampler's order inside a row: easier to read, same result
    return rows


# --- collators ----------------------------------------------------------------------------------------------

def _as_list(values) -> list[int]:
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def _labels_of(example: dict) -> list[int]:
    return _as_list(example["labels"]) if "labels" in example else _as_list(example["input_ids"])


@dataclass(frozen=True)
class StaticShape:
    """One shape for every packed micro-batch of a run, so that compiled code and CUDA graphs made for the first
    micro-batch serve them all (a new shape would mean a recompile, or a graph that cannot replay).

    varlen: one row of `tokens` tokens; `cu_seq_lens` has `sequences` + 1 entries (the examples, then the padding cut
    into pieces of at most `max_len` tokens, then empty sequences); `max_len` is the kernel's max_seqlen.
    sdpa/flex: `rows` rows of `tokens // rows` tokens. Either way the head sees `targets` gathered positions
    (`target_index`), the real ones first and then padding entries whose target is ignored."""

    attention: str
    tokens: int
    rows: int
    sequences: int
    targets: int
    max_len: int
    fill: float = 1.0   # mean share of real tokens in the micro-batches it was made for

    def describe(self) -> str:
        layout = (f"1 x {self.tokens:,} tokens, {self.sequences} sequences of at most {self.max_len}"
                  if self.attention == "varlen" else f"{self.rows} x {self.tokens // self.rows:,} tokens")
        return f"{layout}, {self.targets:,} target rows; {100 * (1 - self.fill):.1f}% padding"


def round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-int(n) // multiple) * multiple)


def targets_of(example: dict) -> int:
    """Positions of an example that are trained on once packed: its labels after the first (the first label is
    ignored in a packed row, see PackedCollator)."""
    return sum(1 for label in _labels_of(example)[1:] if label != IGNORE_INDEX)


def static_shape_for(groups: Sequence[Sequence[int]], lengths: Sequence[int], targets: Sequence[int],
                     attention: str, row_len: int, multiple: int = 64) -> StaticShape:
    """The smallest StaticShape that holds every group (micro-batch) of `groups`: token count rounded up to
    `multiple`, and for varlen room for the examples plus the padding pieces of the emptiest micro-batch."""
    if attention not in PACKING_ATTENTIONS:
        raise ValueError(f"packing attention must be one of {PACKING_ATTENTIONS}, got {attention!r}")
    used = [sum(lengths[i] for i in g) for g in groups]
    most_targets = round_up(max(sum(targets[i] for i in g) for g in groups), multiple)
    if attention == "varlen":
        tokens = round_up(max(used), multiple)
        max_len = max(lengths[i] for g in groups for i in g)
        sequences = max(len(g) + -(-(tokens - u) // max_len) for g, u in zip(groups, used))
        return StaticShape(attention, tokens, 1, sequences, min(most_targets, tokens), max_len,
                           sum(used) / (tokens * len(groups)))
    rows = max(len(pack_into_rows([lengths[i] for i in g], row_len)) for g in groups)
    width = max(row_len, max(lengths[i] for g in groups for i in g))
    tokens = rows * width
    return StaticShape(attention, tokens, rows, 0, min(most_targets, tokens), width,
                       sum(used) / (tokens * len(groups)))


@dataclass
class PackedCollator:
    """Packs the examples of one batch into rows; output depends on the attention kernel (module docstring).

    Every output has input_ids, labels and position_ids of shape [rows, length] and no attention_mask (the
    position ids define the examples); "varlen" packs into one row and adds the cumulative sequence lengths
    its kernel needs (`cu_seq_lens_q/k`, `max_length_q/k`: names transformers forwards to the attention).
    Every output also lists the positions the loss reads (`target_index` into the flattened rows, `target_ids`,
    `n_targets`), worked out here on the CPU so that the loss never has to ask the GPU which positions carry a
    label (each such question stops the CPU until the GPU has caught up).

    With `static`, every batch that fits is padded to that one shape (StaticShape); one that does not (more
    tokens, sequences or targets than the run was planned for) comes out unpadded with `static: False`.
    """

    pad_token_id: int
    row_len: int
    attention: str = "sdpa"
    segment_ids: bool = False  # also return which example each position holds (-1: padding), for per-example sums
    static: StaticShape | None = None

    def __post_init__(self):
        if self.attention not in PACKING_ATTENTIONS:
            raise ValueError(f"packing attention must be one of {PACKING_ATTENTIONS}, got {self.attention!r}")
        if self.static is not None and self.static.attention != self.attention:
            raise ValueError(f"static shape for {self.static.attention}, collator for {self.attention}")

    def __call__(self, examples: list[dict]) -> dict:
        lengths = [len(e["input_ids"]) for e in examples]
        if self.attention == "varlen":
            rows = [list(range(len(examples)))]
        else:
            rows = pack_into_rows(lengths, self.row_len)
        shape = self._static_fit(examples, lengths, rows)
        width = max(sum(lengths[i] for i in row) for row in rows)
        n_rows = len(rows)
        if shape is not None:
            n_rows, width = shape.rows, shape.tokens // shape.rows
        ids = torch.full((n_rows, width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((n_rows, width), IGNORE_INDEX, dtype=torch.long)
        # Pad positions continue counting from 0 so transformers' packed-sequence detection (flex) sees the
        # padding as one more "example", never as part of the last real one.
        positions = torch.zeros((n_rows, width), dtype=torch.long)
        segments = torch.full((n_rows, width), -1, dtype=torch.long)
        for r, row in enumerate(rows):
            start = 0
            for i in row:
                n = lengths[i]
                ids[r, start:start + n] = torch.tensor(_as_list(examples[i]["input_ids"]))
                example_labels = torch.tensor(_labels_of(examples[i]))
                example_labels[0] = IGNORE_INDEX  # the previous example's last token must not predict this
                labels[r, start:start + n] = example_labels
                positions[r, start:start + n] = torch.arange(n)
                segments[r, start:start + n] = i
                start += n
            positions[r, start:] = torch.arange(width - start)
        for r in range(len(rows), n_rows):
            positions[r] = torch.arange(width)
        batch = {"input_ids": ids, "labels": labels, "position_ids": positions}
        if self.segment_ids:
            batch["segment_ids"] = segments
        if self.attention == "varlen":
            bounds = [0] + list(_cumsum(lengths))
            max_len = max(lengths)
            if shape is not None:
                bounds, max_len = _padded_bounds(bounds, shape), shape.max_len
                for a, b in zip(bounds[len(lengths):-1], bounds[len(lengths) + 1:]):
                    positions[0, a:b] = torch.arange(b - a)  # each padding piece is a sequence of its own
            cu = torch.tensor(bounds, dtype=torch.int32)
            batch.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_len, max_length_k=max_len)
        batch.update(target_positions(labels, shape.targets if shape is not None else None))
        if self.static is not None:
            batch["static"] = shape is not None
        return batch

    def _static_fit(self, examples: list[dict], lengths: list[int], rows: list[list[int]]) -> StaticShape | None:
        shape = self.static
        if shape is None or sum(targets_of(e) for e in examples) > shape.targets:
            return None
        if self.attention == "varlen":
            pieces = -(-(shape.tokens - sum(lengths)) // shape.max_len) if sum(lengths) <= shape.tokens else 0
            fits = (sum(lengths) <= shape.tokens and max(lengths) <= shape.max_len
                    and len(lengths) + pieces <= shape.sequences)
        else:
            width = shape.tokens // shape.rows
            fits = len(rows) <= shape.rows and all(sum(lengths[i] for i in row) <= width for row in rows)
        return shape if fits else None


def _padded_bounds(bounds: list[int], shape: StaticShape) -> list[int]:
    """cu_seq_lens of a static varlen row: the examples', then the padding in pieces of at most max_len tokens
    (a kernel computes no row beyond max_len, so one long padding sequence would leave garbage that backward
    multiplies by zero into NaN), then empty sequences up to `shape.sequences`."""
    out = list(bounds)
    while out[-1] < shape.tokens:
        out.append(min(out[-1] + shape.max_len, shape.tokens))
    out += [shape.tokens] * (shape.sequences + 1 - len(out))
    return out


def target_positions(labels: torch.Tensor, size: int | None = None) -> dict:
    """Where the loss reads: position p of the flattened rows predicts token p + 1 when that token's label is not
    ignored. -> target_index (positions), target_ids (their targets), n_targets; padded to `size` entries with
    position 0 and an ignored target."""
    following = torch.full_like(labels, IGNORE_INDEX)
    following[:, :-1] = labels[:, 1:]
    following = following.flatten()
    index = (following != IGNORE_INDEX).nonzero().flatten()
    n = int(index.numel())
    size = n if size is None else size
    target_index = torch.zeros(size, dtype=torch.long)
    target_ids = torch.full((size,), IGNORE_INDEX, dtype=torch.long)
    target_index[:n] = index
    target_ids[:n] = following[index]
    return {"target_index": target_index, "target_ids": target_ids, "n_targets": n}


def _cumsum(values: Sequence[int]) -> Iterator[int]:
    total = 0
    for v in values:
        total += v
        yield total
