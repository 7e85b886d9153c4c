"""GRPO's loss, per token and summed, as TRL 1.16's GRPOTrainer defines it (`_compute_loss`, importance sampling at
the token level), with its key names; tests/test_grpo.py runs TRL's own function on the same tensors.

Inputs are flat over the answer tokens of a micro-batch (stages/logprobs.token_logprobs): each token's log-prob
under the policy (`logps`, with gradients), under the policy that sampled it (`old_logps`: the same weights, so
`logps.detach()`: one optimizer step per generation, TRL's num_iterations 1), under the reference (`ref_logps`), the
advantage of its sequence, and `owner`, the sequence it belongs to.

Per token (GRPO, Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300, eq. 3, with DAPO's asymmetric clip, Yu et al.
2025, arXiv:2503.14476, eq. 8):

    ratio = exp(logp - old_logp);  loss = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)
    kl = exp(ref - logp) - (ref - logp) - 1      (Schulman's k3 estimator of KL(policy || reference))
    loss += beta * kl * ratio                    (the ratio only with use_bias_correction_kl: TRL's default, after
                                                  DeepSeek-V3.2; its value is 1 here but its gradient is not)

Summed over a micro-batch as each loss_type normalises, so that the recipe's division by the `units` of the whole
step (over every rank) gives TRL's loss:
- grpo:    each sequence's token mean, summed; units = sequences              (TRL: mean over sequences)
- dr_grpo: every token summed / max_completion_length; units = sequences      (Liu et al. 2025, "Dr. GRPO",
           arXiv:2503.20783: a constant instead of each sequence's length)
- dapo:    every token summed; units = answer tokens of the step              (DAPO's token-level mean)
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


def per_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                   ref_logps: torch.Tensor | None, beta: float, epsilon_low: float, epsilon_high: float,
                   bias_correction_kl: bool = True) -> tuple[torch.Tensor, dict]:
    """-> (loss per token, {"kl": per-token KL or absent, "ratio": the importance ratio}), all [tokens]."""
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.min(ratio * advantages, clipped * advantages)
    parts = {"ratio": ratio.detach()}
    if beta != 0.0:
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        if bias_correction_kl:
            kl = kl * ratio
        loss = loss + beta * kl
        parts["kl"] = kl.detach()
    return loss, parts


def clipped_tokens(ratio: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float
                   ) -> dict[str, torch.Tensor]:
    """TRL's clip metrics per token (0/1 floats): the ratio below 1 - epsilon on a negative advantage (low), above
    1 + epsilon_high on a positive one (high), either (region)."""
    low = (ratio < 1 - epsilon_low) & (advantages < 0)
    high = (ratio > 1 + epsilon_high) & (advantages > 0)
    return {"clip_ratio/low_mean": low.float(), "clip_ratio/high_mean": high.float(),
            "clip_ratio/region_mean": (low | high).float()}


def summed_loss(token_loss: torch.Tensor, owner: torch.Tensor, n_sequences: int, loss_type: str,
                max_completion_length: int) -> torch.Tensor:
    """The micro-batch's loss summed as `loss_type` normalises it (module docstring); the recipe divides by units."""
    if loss_type == "grpo":
        sums = torch.zeros(n_sequences, dtype=token_loss.dtype, device=token_loss.device).index_add(0, owner,
                                                                                                  token_loss)
        counts = torch.bincount(owner, minlength=n_sequences).clamp(min=1)
        return (sums / counts).sum()
    if loss_type == "dr_grpo":
        return token_loss.sum() / max_completion_length
    if loss_type == "dapo":
        return token_loss.sum()
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def units_of(loss_type: str, n_sequences: int, n_tokens: int) -> int:
    """What one unit of the loss is for `loss_type`: a sequence (grpo, dr_grpo) or an answer token (dapo)."""
    return n_tokens if loss_type == "dapo" else n_sequences
