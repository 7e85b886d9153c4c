"""Which of the numerical guard's spike rules suit each stage (training/guard.py judges; this says what it judges),
and the run's guard built with them (`guard_for`).

A spike rule compares a step's loss, or its gradient norm, with the recent ones. That suits a loss averaged over many
tokens (sft, pt); a preference stage's step loss is a mean over a few pairs or answers, heavy-tailed, and grpo's
gradient comes and goes with the reward signal. Non-finite values are caught in every stage. A run's own
`guard.loss_spikes` wins; where these rules turn one off, the decision says why.
"""

from __future__ import annotations

from steadytune.config import RunConfig
from steadytune.stages.preference import PREFERENCE_STAGES
from steadytune.training.guard import NumericalGuard


def judge_loss_spikes(cfg: RunConfig) -> bool:
    """Whether the guard judges loss spikes, when the run does not say: not for the preference stages. Their step
    loss is a mean over a few pairs or answers, heavy-tailed: against TRL on the H200 a DPO step at 6.3 standard
    deviations above the recent mean (1.91 after a median of 0.72) was an ordinary batch that TRL trained on, and
    dropping such batches would drop the hardest pairs. Non-finite values and gradient-norm spikes are still caught."""
    g = cfg.guard
    if g.loss_spikes is not None:
        return g.loss_spikes
    if cfg.method.stage not in PREFERENCE_STAGES and cfg.method.stage != "grpo":
        return True
    if g.guard_policy != "off":
        cfg.decide("loss_spikes", False, f"stage {cfg.method.stage}: a step's loss over a few " +
                   ("groups of completions is centred on 0 by their advantages" if cfg.method.stage == "grpo" else
                    "pairs is heavy-tailed") + ", so it is not judged for spikes (loss_spikes: true judges it too)")
    return False


def judge_grad_spikes(cfg: RunConfig) -> bool:
    """Not for stage grpo: a step's gradient comes from the groups whose rewards differ, zero when none do, so its
    size swings by orders of magnitude from step to step as the reward signal comes and goes (clipping still bounds
    every update, and non-finite values are still caught)."""
    if cfg.method.stage != "grpo":
        return True
    if cfg.guard.guard_policy != "off":
        cfg.decide("grad_norm_spikes", False, "stage grpo: the gradient norm follows how many groups carry a reward "
                   "signal, so it is not judged for spikes; non-finite values are")
    return False


def guard_for(cfg: RunConfig, precision: str, fallback_precision: str, emit, saved: dict | None) -> NumericalGuard:
    """The run's numerical guard, judging the spikes that suit its stage; every action is an `emit`ted event.
    `saved`: the guard's state in the checkpoint a resume starts from (its statistics and events go on)."""
    guard = NumericalGuard(cfg.guard, precision, emit=emit, max_grad_norm=cfg.train.max_grad_norm,
                           fallback_precision=fallback_precision, judge_loss_spikes=judge_loss_spikes(cfg),
                           judge_grad_spikes=judge_grad_spikes(cfg))
    if saved is not None:
        guard.load_state_dict(saved)
        guard.precision = precision   # a run resumed after a precision switch guards its new precision
    return guard
