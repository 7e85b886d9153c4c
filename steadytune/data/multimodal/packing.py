"""Packing multimodal examples: several examples per row, each keeping its own images (LLaMA-Factory's neat_packing
semantics, hiyouga/LLaMA-Factory#10283), attention and positions kept per example.

- Rows are filled first-fit (data/packing.py's pack_into_rows); an example is never split across rows, so an image's
  tokens always sit whole in one row, next to its example's text.
- The pixels are made in the order the examples' tokens appear in the flattened batch (row by row, left to right), so
  the model, which fills media tokens with image features in that order, gives each example its own images.
- Positions restart at 0 for every example (transformers builds the block-diagonal mask from the restarts, as for
  text packing). Qwen-VL's 3-D rope positions are computed per example (rope.py) and concatenated: a packed row's
  positions equal the examples' unpacked ones (tested). Qwen's position_ids have 4 rows: the plain positions (where
  transformers finds the example boundaries), then time, height, width.
- The first label of every example is ignored (its previous token belongs to another example), as in text packing.
- With one row ("varlen"), cu_seq_lens / max_length for a variable-length flash kernel come with it.
"""

from __future__ import annotations

from typing import Callable

import torch

from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.multimodal.collate import TYPE_KEYS, batch_media
from steadytune.data.multimodal.encode import MediaContext
from steadytune.data.multimodal.rope import text_positions
from steadytune.data.packing import pack_into_rows, target_positions


class MultimodalPackedCollator:
    """Packs a batch of multimodal examples into rows of at most `row_len` tokens (one row with `varlen`)."""

    def __init__(self, ctx: MediaContext, pad_token_id: int, row_len: int, varlen: bool = False,
                 rope: Callable[[dict], torch.Tensor] | None = None):
        self.ctx = ctx
        self.pad_token_id = int(pad_token_id)
        self.row_len = row_len
        self.varlen = varlen
        self.rope = rope

    def rows_of(self, examples: list[dict]) -> list[list[int]]:
        lengths = [len(e["input_ids"]) for e in examples]
        return [list(range(len(examples)))] if self.varlen else pack_into_rows(lengths, self.row_len)

    def __call__(self, examples: list[dict]) -> dict:
        rows = self.rows_of(examples)
        lengths = [len(e["input_ids"]) for e in examples]
        width = max(sum(lengths[i] for i in row) for row in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        plain = torch.zeros((len(rows), width), dtype=torch.long)
        mrope = torch.zeros((3, len(rows), width), dtype=torch.long) if self.rope is not None else None
        types = {key: torch.zeros((len(rows), width), dtype=torch.long) for key in TYPE_KEYS
                 if all(key in e for e in examples)}
        order = []   # examples in the order their tokens appear in the flattened batch: the pixels follow it
        for r, row in enumerate(rows):
            start = 0
            for i in row:
                example, n = examples[i], lengths[i]
                cols = slice(start, start + n)
                ids[r, cols] = torch.as_tensor(example["input_ids"])
                example_labels = torch.as_tensor(example["labels"]).clone()
                example_labels[0] = IGNORE_INDEX
                labels[r, cols] = example_labels
                plain[r, cols] = text_positions(n)
                if mrope is not None:
                    mrope[:, r, cols] = self.rope(example)
                for key, tensor in types.items():
                    tensor[r, cols] = torch.as_tensor(example[key])
                order.append(i)
                start += n
            plain[r, start:] = torch.arange(width - start)   # padding: one more "example" of its own
            if mrope is not None:
                mrope[:, r, start:] = torch.arange(width - start)
        batch = {"input_ids": ids, "labels": labels, **types}
        batch["position_ids"] = plain if mrope is None else torch.cat([plain.unsqueeze(0), mrope], dim=0)
        if self.varlen:
            bounds = torch.tensor([0] + [sum(lengths[: k + 1]) for k in range(len(lengths))], dtype=torch.int32)
            batch.update(cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=max(lengths),
                         max_length_k=max(lengths))
        batch.update(target_positions(labels))
        batch.update(batch_media([examples[i] for i in order], self.ctx))
        return batch
