"""Evaluating a preference stage: its loss and metrics (rewards/chosen, rewards/rejected, rewards/margins,
rewards/accuracies, ...) over examples. During training the objective being trained is used as it is; after
training, `steadytune eval` (evaluate.py) loads the saved output back and calls `evaluate_examples` on it.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from steadytune.config import RunConfig
from steadytune.stages.batches import SequenceCollator
from steadytune.stages.objectives import pop_metrics
from steadytune.training.vision_data import pair_media


@torch.no_grad()
def evaluate_examples(objective: torch.nn.Module, examples: list[dict], collate: Callable, batch_size: int,
                      device: torch.device, autocast=None) -> dict:
    """eval_loss (mean over pairs or answers) and the objective's eval_ metrics over `examples`."""
    objective.eval()
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v)
                 for k, v in collate(examples[start:start + batch_size]).items()}
        with autocast() if autocast is not None else contextlib.nullcontext():
            loss_sum, n = objective(batch)
        total += float(loss_sum)
        count += n
    metrics = pop_metrics(objective, evaluation=True)
    objective.train()
    return {"eval_loss": total / max(count, 1), **{f"eval_{k}": v for k, v in metrics.items()}}


def evaluate_during_training(groups, cfg: RunConfig, accelerator, objective, data, tokenizer, device) -> dict:
    """The stage's `evaluate` (bound to its collation groups): eval batches are padded, one pair per row pair."""
    collate = SequenceCollator(tokenizer.pad_token_id, groups)
    add = pair_media(data, accelerator.unwrap_model(objective).model)
    if add is not None:   # pairs with images: each eval sequence with its pixels
        collate = collate.with_media(add)
    return evaluate_examples(accelerator.unwrap_model(objective), data.eval, collate,
                             cfg.train.per_device_eval_batch_size, device, accelerator.autocast)
