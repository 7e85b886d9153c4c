"""A torch batch sampler over token-budget groups: the reference the tests hold the trainer's own batching
against (the trainer itself batches in training/batches.py).
"""

from __future__ import annotations

import random
from typing import Iterator, Sequence

import torch

from steadytune.data.packing import group_by_token_budget


class TokenBudgetBatchSampler(torch.utils.data.Sampler):
    """Yields lists of dataset indices, each list holding at most `max_tokens` real tokens.

    Shuffles per epoch (seeded) before grouping, so group composition changes between epochs as it would
    with a fixed batch size. Call `set_epoch(epoch)` each epoch (Accelerate does it when present).
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool = True, seed: int = 0):
        self.lengths = [int(n) for n in lengths]
        self.max_tokens = int(max_tokens)
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def groups(self) -> list[list[int]]:
        order = list(range(len(self.lengths)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return group_by_token_budget(self.lengths, order, self.max_tokens)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.groups())

    def __len__(self) -> int:
        return len(self.groups())
