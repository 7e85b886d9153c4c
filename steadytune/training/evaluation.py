"""When the loop evaluates, and which evaluation is the best so far.

eval_strategy (steps or epoch) and eval_steps (a count, or a share of the run below 1, as transformers reads it) say
when; metric_for_best_model says which result is the best (lower for a loss, higher otherwise), and the run's state
keeps its value and its checkpoint's name, so that the best checkpoint is saved at once and never removed.
"""

from __future__ import annotations

import math

from steadytune.training.checkpoint import TrainerState


def should_evaluate(t, step: int, steps_per_epoch: int, total_steps: int) -> bool:
    """Whether the loop evaluates after optimizer step `step` (`t`: the train section)."""
    if t.eval_strategy == "steps":
        every = t.eval_steps or t.logging_steps
        if every < 1:   # a share of the run (transformers' meaning of eval_steps below 1)
            every = max(1, math.ceil(every * total_steps))
        return step % every == 0 or step == total_steps
    if t.eval_strategy == "epoch":
        return step % steps_per_epoch == 0 or step == total_steps
    return False


def update_best(t, state: TrainerState, results: dict) -> bool:
    """Track metric_for_best_model (`t`: the train section); True when this evaluation is the best so far."""
    name = t.metric_for_best_model
    if not name:
        return False
    key = name if name in results else f"eval_{name}"
    if key not in results:
        return False
    value = results[key]
    lower_is_better = "loss" in key
    better = (state.best_metric is None or (value < state.best_metric if lower_is_better else value > state.best_metric))
    if better:
        state.best_metric = value
        state.best_checkpoint = f"checkpoint-{state.global_step}"
    return better
