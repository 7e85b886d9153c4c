"""Class balance for generative classification (`class_balance: none | sampler | loss | both`).

Seed 003: with 55% / 25% / 20% classes the loss climbed from 1.3 to 2.0 as the model drifted to the majority
class; re-sampling minority classes and weighting their loss fixed it. Both levers use inverse-frequency
class weights w_c = N / (K * n_c), which average to 1 over the training examples, so the loss keeps its scale.

- sampler: `make_sampler` draws examples with probability proportional to their class weight, so every class
  is drawn about equally often (with replacement; one "epoch" is still N draws).
- loss: `label_token_weights` gives each label token its class weight, for `loss.causal_lm_loss_sum`.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import torch
from torch.utils.data import WeightedRandomSampler

from steadytune.data.encode import IGNORE_INDEX

MODES = ("none", "sampler", "loss", "both")


def majority_share(counts: Mapping) -> float:
    """The share of the largest class: the accuracy of always answering it (the baseline any classifier must beat)."""
    total = sum(counts.values())
    return max(counts.values()) / total if total else 0.0


def uses_sampler(mode: str) -> bool:
    return mode in ("sampler", "both")


def uses_loss_weights(mode: str) -> bool:
    return mode in ("loss", "both")


def class_weights(counts: Mapping[int, int] | Sequence[int]) -> torch.Tensor:
    """Inverse-frequency weights, one per class id: N / (K * n_c) over the K classes present.

    `counts` is a list indexed by class id, or a mapping class id -> count. A class with no examples gets
    weight 0 (it never occurs, so its weight is never used; 0 keeps the tensor finite).
    """
    if isinstance(counts, Mapping):
        size = max(counts) + 1 if counts else 0
        counts = [int(counts.get(k, 0)) for k in range(size)]
    counts_t = torch.tensor([int(c) for c in counts], dtype=torch.float64)
    present = counts_t > 0
    if not present.any():
        raise ValueError("class_weights: no class has any example")
    total, n_present = counts_t.sum(), present.sum()
    weights = torch.zeros_like(counts_t)
    weights[present] = total / (n_present * counts_t[present])
    return weights.float()


def make_sampler(label_ids: Sequence[int], seed: int, num_samples: int | None = None) -> WeightedRandomSampler:
    """A sampler for a torch DataLoader that draws each class about equally often (inverse frequency),
    reproducibly from `seed`. Draws `num_samples` indices per pass (default: the dataset size)."""
    if not label_ids:
        raise ValueError("make_sampler: no examples")
    weights = class_weights(Counter(int(k) for k in label_ids))
    per_example = weights[torch.tensor([int(k) for k in label_ids])].double()
    generator = torch.Generator().manual_seed(int(seed))
    return WeightedRandomSampler(per_example, num_samples or len(label_ids), replacement=True, generator=generator)


def label_token_weights(batch: Mapping, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Per-token loss weights shaped like batch["labels"]: a trained token of an example of class c gets
    weights[c], every other position 1 (those are ignored by the loss anyway).

    The batch must carry "label_ids" (as `PadCollator` builds it) or "label_id": one class id per row; a row
    without a class (-1 or None) keeps weight 1.
    """
    labels = batch["labels"]
    key = next((k for k in ("label_ids", "label_id") if k in batch), None)
    if key is None:
        raise KeyError("class-weighted loss needs batch['label_ids'] (one class id per row)")
    ids = batch[key]
    ids = [(-1 if k is None else int(k)) for k in (ids.tolist() if torch.is_tensor(ids) else ids)]
    weights_t = torch.as_tensor(weights, dtype=torch.float32)
    per_row = torch.tensor([float(weights_t[k]) if k >= 0 else 1.0 for k in ids], dtype=torch.float32)
    out = torch.ones(labels.shape, dtype=torch.float32, device=labels.device)
    trained = labels != IGNORE_INDEX
    return torch.where(trained, per_row.to(labels.device)[:, None].expand_as(out), out)
