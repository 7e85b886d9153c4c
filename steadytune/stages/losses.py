"""Preference losses, each written from its paper's definition, on per-sequence log-probabilities.

Inputs are 1-D tensors with one value per pair (or per answer, for KTO). "logps" are the summed log-probabilities
of the answer tokens, except where a loss is defined on the per-token average (IPO, ORPO, SimPO: see
AVERAGED_LOSSES). Every function returns (per-example losses, chosen rewards, rejected rewards); the rewards are
what the metrics report (rewards/chosen, rewards/rejected, their margin and how often chosen > rejected) and carry
no gradient. Key names and defaults are LLaMA-Factory's (`pref_beta`, `pref_loss`, `simpo_gamma`,
`dpo_label_smoothing`, `kto_chosen_weight`, `kto_rejected_weight`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

Losses = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def dpo_sigmoid(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
                beta: float, label_smoothing: float = 0.0) -> Losses:
    """DPO (Rafailov et al. 2023, "Direct Preference Optimization", arXiv:2305.18290, eq. 7):
        L = -log sigmoid(beta * [(log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))]).
    With label smoothing eps (conservative DPO, Mitchell 2023; robust DPO, Chowdhury et al. 2024, arXiv:2403.00409,
    in its "flipped label" form): (1 - eps) * L(y_w > y_l) + eps * L(y_l > y_w)."""
    z = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))
    losses = -F.logsigmoid(z) * (1 - label_smoothing) - F.logsigmoid(-z) * label_smoothing
    return losses, beta * (chosen - ref_chosen).detach(), beta * (rejected - ref_rejected).detach()


def dpo_hinge(chosen, rejected, ref_chosen, ref_rejected, beta: float) -> Losses:
    """Hinge loss of SLiC-HF (Zhao et al. 2023, "SLiC-HF", arXiv:2305.10425, eq. 1 with the reference log-ratio
    as in DPO's framing): L = max(0, 1 - beta * [log-ratio(y_w) - log-ratio(y_l)])."""
    z = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))
    return torch.relu(1 - z), beta * (chosen - ref_chosen).detach(), beta * (rejected - ref_rejected).detach()


def ipo(chosen, rejected, ref_chosen, ref_rejected, beta: float) -> Losses:
    """IPO (Azar et al. 2023, "A General Theoretical Paradigm to Understand Learning from Human Preferences",
    arXiv:2310.12036, eq. 17), with tau = beta: L = (h - 1 / (2 tau))^2, h = log-ratio(y_w) - log-ratio(y_l),
    on per-token average log-probabilities."""
    h = (chosen - ref_chosen) - (rejected - ref_rejected)
    return (h - 1 / (2 * beta)) ** 2, beta * (chosen - ref_chosen).detach(), beta * (rejected - ref_rejected).detach()


def orpo(chosen, rejected, beta: float) -> Losses:
    """ORPO (Hong et al. 2024, "ORPO: Monolithic Preference Optimization without Reference Model",
    arXiv:2403.07691, eqs. 6-7), with lambda = beta, on per-token average log-probabilities P:
        L = -log P(y_w|x) - lambda * log sigmoid(log odds(y_w) - log odds(y_l)),  odds(y) = P / (1 - P)."""
    log_odds = (chosen - rejected) - (_log1mexp(chosen) - _log1mexp(rejected))
    losses = -chosen - beta * F.logsigmoid(log_odds)
    return losses, beta * chosen.detach(), beta * rejected.detach()


def simpo(chosen, rejected, beta: float, gamma: float) -> Losses:
    """SimPO (Meng et al. 2024, "SimPO: Simple Preference Optimization with a Reference-Free Reward",
    arXiv:2405.14734, eq. 6), on per-token average log-probabilities:
        L = -log sigmoid(beta * avg log pi(y_w|x) - beta * avg log pi(y_l|x) - gamma)."""
    losses = -F.logsigmoid(beta * (chosen - rejected) - gamma)
    return losses, beta * chosen.detach(), beta * rejected.detach()


def kto(logps: torch.Tensor, ref_logps: torch.Tensor, desirable: torch.Tensor, kl: torch.Tensor, beta: float,
        chosen_weight: float, rejected_weight: float) -> Losses:
    """KTO (Ethayarajh et al. 2024, "KTO: Model Alignment as Prospect Theoretic Optimization", arXiv:2402.01306,
    eq. 8), per answer y with reward r = log pi(y|x) - log ref(y|x) and reference point z0 = `kl` (an estimate of
    KL(pi || ref) from mismatched pairs, clamped at 0, no gradient):
        desirable:   lambda_D * (1 - sigmoid(beta * (r - z0)))
        undesirable: lambda_U * (1 - sigmoid(beta * (z0 - r)))
    (the paper's v(x, y) subtracted from lambda_y, whose constant changes no gradient; as TRL and LLaMA-Factory
    compute it). Rewards: beta * r, reported separately for desirable (chosen) and undesirable (rejected) answers."""
    r = logps - ref_logps
    losses = torch.where(desirable, chosen_weight * (1 - torch.sigmoid(beta * (r - kl))),
                         rejected_weight * (1 - torch.sigmoid(beta * (kl - r))))
    rewards = beta * r.detach()
    return losses, rewards[desirable], rewards[~desirable]


def kl_reference_point(kl_logps: torch.Tensor, ref_kl_logps: torch.Tensor) -> torch.Tensor:
    """KTO's z0: the mean log-ratio of the mismatched (prompt, other answer) pairs, clamped at 0, detached."""
    return (kl_logps - ref_kl_logps).mean().clamp(min=0).detach()


def pairwise_reward(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> Losses:
    """Reward-model loss under the Bradley-Terry model (Ouyang et al. 2022, "Training language models to follow
    instructions with human feedback", arXiv:2203.02155, eq. 1): L = -log sigmoid(r(x, y_w) - r(x, y_l))."""
    return (-F.logsigmoid(chosen_scores - rejected_scores), chosen_scores.detach(), rejected_scores.detach())


def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurately (log(-expm1(x)))."""
    return torch.log(-torch.expm1(x))


@dataclass(frozen=True)
class PairLoss:
    """One `pref_loss`: whether it compares against a reference model, whether it takes per-token average
    log-probabilities, and the function of (chosen, rejected, ref_chosen, ref_rejected, method args)."""
    uses_reference: bool
    averaged: bool
    compute: Callable[..., Losses]


PAIR_LOSSES: dict[str, PairLoss] = {
    "sigmoid": PairLoss(True, False, lambda c, r, rc, rr, m: dpo_sigmoid(c, r, rc, rr, m.pref_beta,
                                                                           m.dpo_label_smoothing)),
    "hinge": PairLoss(True, False, lambda c, r, rc, rr, m: dpo_hinge(c, r, rc, rr, m.pref_beta)),
    "ipo": PairLoss(True, True, lambda c, r, rc, rr, m: ipo(c, r, rc, rr, m.pref_beta)),
    "orpo": PairLoss(False, True, lambda c, r, rc, rr, m: orpo(c, r, m.pref_beta)),
    "simpo": PairLoss(False, True, lambda c, r, rc, rr, m: simpo(c, r, m.pref_beta, m.simpo_gamma)),
}


def average(sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return sums / counts.clamp(min=1)


def sft_term(chosen_sums: torch.Tensor, chosen_counts: torch.Tensor, weight: float) -> Optional[torch.Tensor]:
    """`pref_ftx`: weight x the chosen answer's mean negative log-likelihood per token (LLaMA-Factory's SFT term)."""
    return -weight * average(chosen_sums, chosen_counts) if weight > 0 else None
