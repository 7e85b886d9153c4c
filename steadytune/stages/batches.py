"""Batches of preference examples: every sequence of a micro-batch in one forward, padded or packed.

An example holds its sequences one after the other (data/preference.py: `input_ids`, `labels`, `lengths`). The
collator cuts them apart and hands them to sft's collators (PadCollator, or packing.PackedCollator when packing is
on, so pairs pack exactly as sft examples do: varlen rows, position ids restarting per sequence), then numbers
them: sequence k of example i is segment k * B + i. For a pair that puts all chosen answers first, then all rejected
ones, and one forward scores both (the log-probs are summed per segment: stages/logprobs.py).

`groups` says which sequences go through which forward: DPO and the reward model send both sequences through one
(("", (0, 1))); KTO sends its answers through one with gradients and the mismatched KL pairs through a second
without (("", (0,)), ("kl_", (1,))), under keys prefixed "kl_".
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Sequence

import torch

from steadytune.config import ConfigError
from steadytune.data.collators import PadCollator
from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.packing import PackedCollator, static_shape_for, targets_of

# Per-token lists beside input_ids (a vision-language pair's token types) are cut like input_ids; the prompt's media
# (image references and grids) belong to every sequence of the example.
PER_TOKEN_KEYS = ("token_type_ids", "mm_token_type_ids")
SHARED_MEDIA_KEYS = ("images", "videos", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "where")
PAIR_GROUPS = (("", (0, 1)),)
FEEDBACK_GROUPS = (("", (0,)), ("kl_", (1,)))


def split_sequences(example: dict) -> list[dict]:
    """An example's sequences as sft-style examples {"input_ids", "labels"} (+ their token types and the prompt's
    media, for a vision-language pair)."""
    out, start = [], 0
    shared = {k: example[k] for k in SHARED_MEDIA_KEYS if k in example}
    for n in example["lengths"]:
        sequence = {k: example[k][start:start + n] for k in ("input_ids", "labels", *PER_TOKEN_KEYS) if k in example}
        out.append({**sequence, **shared})
        start += n
    return out


class SequenceCollator:
    """Preference examples -> one batch: each group's sequences collated (padded or packed) with `segment_ids`,
    plus `n_examples` (the loss normaliser) and, for KTO, `kto_tags`."""

    def __init__(self, pad_token_id: int, groups: Sequence[tuple[str, Sequence[int]]] = PAIR_GROUPS,
                 packing_attention: str | None = None, row_len: int = 2048):
        self.groups = groups
        self.add_media: Callable[[dict, list[dict]], dict] | None = None
        if packing_attention is None:
            self.inner = _PaddedWithSegments(pad_token_id)
        else:
            self.inner = PackedCollator(pad_token_id, row_len=row_len, attention=packing_attention, segment_ids=True)

    # --- one shape for every micro-batch (packed pairs only), so that compiled layers never recompile ----------
    def static_shape_for(self, examples: Sequence[dict], groups: Sequence[Sequence[int]]):
        """The smallest packing.StaticShape that holds every micro-batch of `groups` (indices into `examples`) as
        this collator packs it: each example's sequences counted as sequences of their own."""

        if len(self.groups) != 1 or not hasattr(self.inner, "static"):
            raise ValueError("static shapes need packing and every sequence in one forward (dpo, rm; not kto)")
        which = self.groups[0][1]
        first, lengths, targets = {}, [], []
        for i in sorted({i for g in groups for i in g}):
            first[i] = len(lengths)
            sequences = split_sequences(examples[i])
            for k in which:
                lengths.append(len(sequences[k]["input_ids"]))
                targets.append(targets_of(sequences[k]))
        sequence_groups = [[first[i] + j for i in g for j in range(len(which))] for g in groups]
        return static_shape_for(sequence_groups, lengths, targets, self.inner.attention, self.inner.row_len)

    def with_static(self, shape) -> "SequenceCollator":
        """This collator, padding every packed micro-batch that fits to `shape` (the rest stay unpadded)."""
        padded = copy.copy(self)
        padded.inner = dataclasses.replace(self.inner, static=shape)
        return padded

    def with_media(self, add_media: Callable[[dict, list[dict]], dict]) -> "SequenceCollator":
        """This collator, each group's padded batch completed by `add_media(batch, its sequences)` (pixels, token
        types, Qwen-VL positions: data/multimodal/collate.py's add_media). Padded batches only: packing pairs with
        images is not built (each packed row would need its sequences' images in row order)."""
        if not isinstance(self.inner, _PaddedWithSegments):
            raise ConfigError("packing: preference pairs with images are trained padded here (packing: false, "
                              "neat_packing: false)")
        out = copy.copy(self)
        out.add_media = add_media
        return out

    def __call__(self, examples: list[dict]) -> dict:
        sequences = [split_sequences(e) for e in examples]
        # Answer tokens of every sequence (chosen and rejected, or the answer and its KL mismatch), counted here on
        # the host so that reporting them costs no device sync.
        batch: dict = {"n_examples": len(examples),
                       "n_target_tokens": sum(1 for e in examples for t in e["labels"] if t != IGNORE_INDEX)}
        for prefix, which in self.groups:
            flat = [sequences[i][k] for k in which for i in range(len(examples))]
            part = self.inner(flat)
            if self.add_media is not None:
                part = self.add_media(part, flat)
            batch.update({prefix + key: value for key, value in part.items()})
        if batch.get("static") is True and getattr(self.inner, "attention", None) == "varlen":
            self._into_slots(batch, len(examples))
        if all("kto_tag" in e for e in examples):
            batch["kto_tags"] = torch.tensor([bool(e["kto_tag"]) for e in examples])
        return batch

    def _into_slots(self, batch: dict, n: int) -> None:
        """A static varlen batch's sequences numbered into fixed slots (objectives.PairObjective.compute): sequence
        k of example i becomes segment k * S + i, S the most examples the static shape holds (each of its
        sequences is a sequence of the row, so S = sequences // sequences per example); `example_mask` marks the
        real ones, and `last_index` each slot's last token in the row (where a reward model reads its score; 0 for
        an empty slot). The same shapes for every micro-batch, so a CUDA graph can replay them all."""
        per_example = len(self.groups[0][1])
        slots = self.inner.static.sequences // per_example
        segments = batch["segment_ids"]
        kind, index = segments.div(n, rounding_mode="floor"), segments.remainder(n)
        batch["segment_ids"] = torch.where(segments >= 0, kind * slots + index, segments)
        # The row's sequences in order: sequence j = k * n + i is sequence k of example i, slot k * S + i.
        j = torch.arange(per_example * n)
        last = torch.zeros(per_example * slots, dtype=torch.long)
        last[(j // n) * slots + j % n] = batch["cu_seq_lens_q"][1:per_example * n + 1].long() - 1
        batch["last_index"] = last
        batch["slots"] = slots
        batch["example_mask"] = torch.arange(slots) < n


class _PaddedWithSegments(PadCollator):
    """Right padding, one sequence per row; segment k is row k."""

    def __init__(self, pad_token_id: int):
        super().__init__(pad_token_id, padding_side="right")

    def __call__(self, examples: list[dict]) -> dict:
        batch = super().__call__(examples)
        rows = torch.arange(len(examples))[:, None].expand_as(batch["input_ids"])
        batch["segment_ids"] = torch.where(batch["attention_mask"].bool(), rows, -1)
        return batch


def count_answer_tokens(batch: dict) -> int:
    """The target tokens of a preference micro-batch (what `tokens` means for sft too)."""
    return int(batch["n_target_tokens"])


def count_examples(batch: dict) -> int:
    """The loss normaliser of a preference micro-batch: its pairs (dpo, rm) or answers (kto)."""
    return int(batch["n_examples"])
