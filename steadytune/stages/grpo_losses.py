"""GRPO's loss family, per token and summed, as TRL 1.16's GRPOTrainer defines it (`_compute_loss`), with its key
names (`loss_type`, `importance_sampling_level`, `epsilon`, `epsilon_high`, `delta`, `sapo_temperature_pos/neg`, `beta`,
`use_bias_correction_kl`); tests/test_grpo_losses.py runs TRL's own function on the same tensors, and each paper's
formula written out on hand-computed cases.

Inputs are flat over the answer tokens of a micro-batch (stages/logprobs.token_logprobs): each token's log-prob
under the policy (`logps`, with gradients), under the policy that sampled it (`old_logps`: `logps.detach()` when the
same weights sampled it, as in a synchronous step; the sampling weights' own log-probs when the roll-out ran ahead of
the weights: stages/rollout_ahead.py), under the reference (`ref_logps`), the advantage of its sequence, and `owner`,
the sequence it belongs to.

The importance weight w (TRL's coef_1):
- importance_sampling_level token:    w_t = exp(logp_t - old_logp_t)                       (one per token)
- importance_sampling_level sequence: w = exp(mean over the sequence's tokens of (logp - old_logp))  (GSPO, Zheng et
  al. 2025, arXiv:2507.18071, eq. 7: one per sequence, every token of it gets the same; its gradient reaches every
  token's log-prob through the mean)

The per-token loss by loss_type (A: the sequence's advantage):
- grpo, dr_grpo, dapo, luspo:  -min(w A, clip(w, 1 - epsilon, 1 + epsilon_high) A)   (the clipped surrogate:
  DeepSeekMath, arXiv:2402.03300, eq. 3, with DAPO's asymmetric clip-higher, arXiv:2503.14476, eq. 8); with `delta`,
  the unclipped term's w is capped at delta first (INTELLECT-2's two-sided clipping, arXiv:2505.07291)
- cispo:  -sg(min(w, epsilon_high)) A logp   (MiniMax-M1, arXiv:2506.13585, eq. 4: the importance weight is clipped
  and detached, the gradient of every token is kept; epsilon_high is the weight's upper bound itself, ScaleRL's
  epsilon_max, not 1 + epsilon_high)
- sapo:   -(4 / tau) sigmoid(tau (w - 1)) A,  tau = sapo_temperature_pos where A > 0, else sapo_temperature_neg
  (Soft Adaptive Policy Optimization, arXiv:2511.20347: a smooth gate instead of the hard clip)
plus, with beta > 0, beta * k3 where k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman's estimator of
KL(policy || reference)), multiplied by w with use_bias_correction_kl (TRL's default, after DeepSeek-V3.2).

Summed over a micro-batch as each loss_type normalises, so that the recipe's division by the `units` of the whole
step (over every rank) gives TRL's loss:
- grpo, sapo: each sequence's token mean, summed; units = sequences      (TRL: mean over sequences)
- dr_grpo:    every token summed / max_completion_length; units = sequences (Dr. GRPO, arXiv:2503.20783: a constant
              instead of each sequence's length)
- luspo:      every token summed; units = sequences                       (LUSPO, arXiv:2602.05261: each sequence's
              GSPO loss scaled by its length, mean over sequences)
- dapo, cispo: every token summed; units = answer tokens of the step      (DAPO's token-level mean)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
TOKEN_NORMALISED = ("dapo", "cispo")          # units: the step's answer tokens
SEQUENCE_MEAN = ("grpo", "sapo")              # each sequence's token mean, then over sequences
CLIPPED_SURROGATE = ("grpo", "dr_grpo", "dapo", "luspo")
CISPO_EPSILON_MAX = 5.0   # ScaleRL's recommended epsilon_max for cispo (arXiv:2510.13786), TRL's doc's value


@dataclass(frozen=True)
class LossSettings:
    """The loss's keys from the method section (TRL's names), resolved: epsilon_high defaults as TRL's does."""
    loss_type: str = "dapo"
    importance_sampling_level: str = "token"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    delta: Optional[float] = None
    beta: float = 0.0
    bias_correction_kl: bool = True
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    max_completion_length: int = 512

    @classmethod
    def of(cls, m) -> "LossSettings":
        """From the method section (config.MethodArguments); epsilon_high unset is epsilon, as in TRL (the config
        sets cispo's own default before this: config._check_grpo)."""
        return cls(m.loss_type, m.importance_sampling_level, m.epsilon,
                   m.epsilon_high if m.epsilon_high is not None else m.epsilon, m.delta, m.beta,
                   m.use_bias_correction_kl, m.sapo_temperature_pos, m.sapo_temperature_neg, m.max_completion_length)


def per_sequence_mean(values: torch.Tensor, owner: torch.Tensor, n_sequences: int) -> torch.Tensor:
    """The mean of each sequence's values [n_sequences] (0 for a sequence without tokens)."""
    sums = torch.zeros(n_sequences, dtype=values.dtype, device=values.device).index_add(0, owner, values)
    counts = torch.bincount(owner, minlength=n_sequences).clamp(min=1)
    return sums / counts


def log_importance_weights(logps: torch.Tensor, old_logps: torch.Tensor, owner: torch.Tensor, n_sequences: int,
                           level: str) -> torch.Tensor:
    """log w per token [tokens]: the token's own log-ratio, or (sequence) its sequence's mean log-ratio."""
    log_ratio = logps - old_logps
    if level == "token":
        return log_ratio
    if level == "sequence":
        return per_sequence_mean(log_ratio, owner, n_sequences)[owner]
    raise ValueError(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {level!r}")


def per_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                   ref_logps: Optional[torch.Tensor], owner: torch.Tensor, n_sequences: int, s: LossSettings
                   ) -> tuple[torch.Tensor, dict]:
    """-> (loss per token [tokens], {"ratio": the importance weight w per token, "kl": per-token KL (beta > 0)})."""
    weight = torch.exp(log_importance_weights(logps, old_logps, owner, n_sequences, s.importance_sampling_level))
    if s.loss_type == "cispo":
        loss = -torch.clamp(weight, max=s.epsilon_high).detach() * advantages * logps
    elif s.loss_type in CLIPPED_SURROGATE:
        clipped = torch.clamp(weight, 1 - s.epsilon_low, 1 + s.epsilon_high)
        unclipped = torch.clamp(weight, max=s.delta) if s.delta is not None else weight
        loss = -torch.min(unclipped * advantages, clipped * advantages)
    elif s.loss_type == "sapo":
        tau = torch.where(advantages > 0, torch.full_like(advantages, s.sapo_temperature_pos),
                          torch.full_like(advantages, s.sapo_temperature_neg))
        loss = -torch.sigmoid(tau * (weight - 1)) * 4 / tau * advantages
    else:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {s.loss_type!r}")
    parts = {"ratio": weight.detach()}
    if s.beta != 0.0:
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        if s.bias_correction_kl:
            kl = kl * weight
        loss = loss + s.beta * kl
        parts["kl"] = kl.detach()
    return loss, parts


def clip_metrics(ratio: torch.Tensor, advantages: torch.Tensor, owner: torch.Tensor, n_sequences: int,
                 s: LossSettings) -> dict[str, torch.Tensor]:
    """TRL's clip metrics as 0/1 floats, one per token (one per sequence at the sequence level, as TRL averages
    them there): the clipped surrogate's low (w below 1 - epsilon on a negative advantage), high (above
    1 + epsilon_high on a positive one) and either (region); cispo's cispo_clip_ratio (w above epsilon_high on a
    positive advantage); sapo has none."""
    if s.importance_sampling_level == "sequence":
        present = torch.bincount(owner, minlength=n_sequences) > 0
        ratio = per_sequence_mean(ratio, owner, n_sequences)[present]
        advantages = per_sequence_mean(advantages, owner, n_sequences)[present]
    if s.loss_type == "cispo":
        return {"cispo_clip_ratio": ((ratio > s.epsilon_high) & (advantages > 0)).float()}
    if s.loss_type not in CLIPPED_SURROGATE:
        return {}
    low = (ratio < 1 - s.epsilon_low) & (advantages < 0)
    high = (ratio > 1 + s.epsilon_high) & (advantages > 0)
    return {"clip_ratio/low_mean": low.float(), "clip_ratio/high_mean": high.float(),
            "clip_ratio/region_mean": (low | high).float()}


def clip_metric_names(loss_type: str) -> tuple[str, ...]:
    if loss_type == "cispo":
        return ("cispo_clip_ratio",)
    if loss_type in CLIPPED_SURROGATE:
        return ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
    return ()


def summed_loss(token_loss: torch.Tensor, owner: torch.Tensor, n_sequences: int, s: LossSettings) -> torch.Tensor:
    """The micro-batch's loss summed as `loss_type` normalises it (module docstring); the recipe divides by units."""
    if s.loss_type in SEQUENCE_MEAN:
        return per_sequence_mean(token_loss, owner, n_sequences).sum()
    if s.loss_type == "dr_grpo":
        return token_loss.sum() / s.max_completion_length
    if s.loss_type in TOKEN_NORMALISED or s.loss_type == "luspo":
        return token_loss.sum()
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {s.loss_type!r}")


def units_of(loss_type: str, n_sequences: int, n_tokens: int) -> int:
    """What one unit of the loss is for `loss_type`: an answer token (dapo, cispo) or a sequence (the others)."""
    return n_tokens if loss_type in TOKEN_NORMALISED else n_sequences
