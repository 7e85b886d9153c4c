"""Pad a list of tokenised examples into a batch of tensors: the one padding collator (packing's collator, which
concatenates examples instead, is data/packing.py)."""

from __future__ import annotations

import math

import torch

from steadytune.data.encode import IGNORE_INDEX


def as_list(values) -> list[int]:
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


class PadCollator:
    """Pads to the longest example of the batch (not to cutoff_len: padding is wasted compute), or up to a multiple
    of `pad_to_multiple_of`.

    Left padding puts every prompt's last token at the same position, which is what scoring the next token
    of a classification prompt (and `logits_to_keep`) wants; right padding is the usual choice for SFT.
    Labels default to the input ids (every token trained) and are IGNORE_INDEX on padding.
    """

    def __init__(self, pad_token_id: int, padding_side: str = "right", pad_to_multiple_of: int | None = None):
        if pad_token_id is None:
            raise ValueError("PadCollator needs a pad_token_id (set tokenizer.pad_token)")
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        self.pad_token_id = int(pad_token_id)
        self.padding_side = padding_side
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        length = max(len(e["input_ids"]) for e in examples)
        if self.pad_to_multiple_of:
            length = math.ceil(length / self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = torch.full((len(examples), length), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), length), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(examples), length), dtype=torch.long)
        for row, example in enumerate(examples):
            n = len(example["input_ids"])
            cols = slice(length - n, length) if self.padding_side == "left" else slice(0, n)
            ids[row, cols] = torch.tensor(as_list(example["input_ids"]), dtype=torch.long)
            labels[row, cols] = torch.tensor(as_list(example.get("labels", example["input_ids"])), dtype=torch.long)
            mask[row, cols] = 1
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if all("label_id" in e for e in examples):
            batch["label_ids"] = torch.tensor([e["label_id"] for e in examples], dtype=torch.long)
        return batch
