"""Pad a list of tokenised examples into a batch of tensors."""

from __future__ import annotations

import torch

from steadytune.data.encode import IGNORE_INDEX


class PadCollator:
    """Pads to the longest example of the batch (not to cutoff_len: padding is wasted compute).

    Left padding puts every prompt's last token at the same position, which is what scoring the next token
    of a classification prompt (and `logits_to_keep`) wants; right padding is the usual choice for SFT.
    """

    def __init__(self, pad_token_id: int, padding_side: str = "right"):
        if pad_token_id is None:
            raise ValueError("PadCollator needs a pad_token_id (set tokenizer.pad_token)")
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        self.pad_token_id = int(pad_token_id)
        self.padding_side = padding_side

    def _pad(self, seq: list[int], length: int, value: int) -> list[int]:
        fill = [value] * (length - len(seq))
        return fill + list(seq) if self.padding_side == "left" else list(seq) + fill

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        length = max(len(e["input_ids"]) for e in examples)
        batch = {
            "input_ids": torch.tensor([self._pad(e["input_ids"], length, self.pad_token_id) for e in examples]),
            "attention_mask": torch.tensor([self._pad([1] * len(e["input_ids"]), length, 0) for e in examples]),
            "labels": torch.tensor([self._pad(e.get("labels", e["input_ids"]), length, IGNORE_INDEX) for e in examples]),
        }
        if all("label_id" in e for e in examples):
            batch["label_ids"] = torch.tensor([e["label_id"] for e in examples], dtype=torch.long)
        return batch
