"""Stage sft's other losses, as LLaMA-Factory 0.9.5 computes them (its train/trainer_utils.py):

- DFT (`use_dft_loss`, dynamic fine-tuning): each labelled token's cross-entropy times the token's probability under
  the model, the probability taken without gradient (dft_loss_func).
- EAFT (`use_eaft_loss`): each token's cross-entropy times (H / 3) ** eaft_alpha, H the entropy of the model's
  distribution renormalised over its 20 most likely tokens, without gradient (eaft_loss_func).
- ASFT (`use_asft_loss`): the DFT loss plus asft_alpha x KL(reference || model) of each labelled token's next-token
  distribution (asft_loss_func); the reference is the starting model (stages/reference.py: with LoRA the model with
  its adapter switched off, else a frozen copy).

Each is a sum over the labelled tokens with their count, like the cross-entropy (training/loss.py), so the loop
normalises over the tokens of the whole optimizer step: LLaMA-Factory's DFT and EAFT divide by the step's
num_items_in_batch the same way. Its ASFT takes each micro-batch's mean and transformers adds them up without
dividing by gradient_accumulation_steps (it skips that division whenever a loss function is given), so with
accumulation its gradient is that many times larger than the token mean here; with one micro-batch a step they agree.

The DFT and EAFT weights are computed a chunk of rows at a time without gradient, then the chunked cross-entropy
(training/loss.py) runs with them as token weights: the vocabulary-wide logits are never kept whole. ASFT needs both
models' whole distributions at every labelled token, so its KL term is computed over the full logits of those rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from steadytune.config import RunConfig
from steadytune.data.encode import IGNORE_INDEX
from steadytune.model.anatomy import final_logit_softcap, output_head, run_body
from steadytune.stages.reference import build_reference
from steadytune.training.loss import CHUNK_LOGITS, labelled_cross_entropy_sum, labelled_rows, model_inputs

EAFT_TOP_K = 20        # LLaMA-Factory's entropy approximation: the 20 most likely tokens
EAFT_ENTROPY_SCALE = 3.0


def _chunks(rows: torch.Tensor, head: torch.nn.Module):
    step = max(1, CHUNK_LOGITS // head.weight.shape[0])
    for start in range(0, rows.shape[0], step):
        yield start, rows[start:start + step]


def _logits(head: torch.nn.Module, rows: torch.Tensor, softcap: float | None) -> torch.Tensor:
    logits = head(rows).float()
    return torch.tanh(logits / softcap) * softcap if softcap else logits


def dft_weights(head: torch.nn.Module, rows: torch.Tensor, targets: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Each row's probability of its target (exp of minus its cross-entropy); ignored rows weigh 0."""
    out = torch.zeros(rows.shape[0], dtype=torch.float32, device=rows.device)
    for start, chunk in _chunks(rows, head):
        target = targets[start:start + len(chunk)]
        ce = F.cross_entropy(_logits(head, chunk, softcap), target.clamp_min(0), reduction="none")
        out[start:start + len(chunk)] = torch.exp(-ce) * (target != IGNORE_INDEX)
    return out


def eaft_weights(alpha: float):
    def weigh(head: torch.nn.Module, rows: torch.Tensor, targets: torch.Tensor, softcap: float | None) -> torch.Tensor:
        """(entropy over the top 20 tokens / 3) ** alpha for each row."""
        out = torch.zeros(rows.shape[0], dtype=torch.float32, device=rows.device)
        for start, chunk in _chunks(rows, head):
            top = torch.topk(_logits(head, chunk, softcap), k=EAFT_TOP_K, dim=-1).values
            logp = top - torch.logsumexp(top, dim=-1, keepdim=True)
            entropy = -(logp.exp() * logp).sum(dim=-1)
            out[start:start + len(chunk)] = torch.pow(entropy / EAFT_ENTROPY_SCALE, alpha)
        return out
    return weigh


class ASFTObjective(torch.nn.Module):
    """The DFT loss plus asft_alpha x KL(reference || model), summed over the labelled tokens."""

    def __init__(self, model: torch.nn.Module, cfg: RunConfig):
        super().__init__()
        self.model = model
        self.alpha = cfg.method.asft_alpha
        self.reference = build_reference(model, cfg)

    def _reference_rows(self, batch: dict) -> torch.Tensor:
        with torch.no_grad():
            if self.reference.separate is not None:
                ref = self.reference.separate
                hidden = run_body(ref, model_inputs(batch), use_cache=False).last_hidden_state
                return _logits(output_head(ref), labelled_rows(hidden, batch)[0], final_logit_softcap(ref))
            with self.model.disable_adapter():
                hidden = run_body(self.model, model_inputs(batch), use_cache=False).last_hidden_state
                return _logits(output_head(self.model), labelled_rows(hidden, batch)[0],
                               final_logit_softcap(self.model))

    def forward(self, batch: dict) -> tuple[torch.Tensor, int]:
        hidden = run_body(self.model, model_inputs(batch), use_cache=False).last_hidden_state
        rows, targets, weights, n = labelled_rows(hidden, batch, batch.get("token_weights"))
        if rows is None:
            return hidden.sum() * 0.0, 0
        head, softcap = output_head(self.model), final_logit_softcap(self.model)
        with torch.no_grad():
            dft = dft_weights(head, rows, targets, softcap)
        weights = dft if weights is None else weights * dft
        loss = labelled_cross_entropy_sum(head, rows, targets, weights, softcap)
        valid = (targets != IGNORE_INDEX).float()
        ref_probs = F.softmax(self._reference_rows(batch), dim=-1)
        log_p = F.log_softmax(_logits(head, rows, softcap), dim=-1)
        kl = F.kl_div(log_p, ref_probs, reduction="none").sum(dim=-1)
        return loss + self.alpha * (kl * valid).sum(), n


def make_sft_objective(model: torch.nn.Module, cfg: RunConfig, plain):
    """Stage sft's objective: `plain(model, weigher=None)` (the cross-entropy objective, its tokens weighed by
    `weigher` for DFT and EAFT), or ASFT's; the loss recorded in decisions."""
    m = cfg.method
    if m.use_dft_loss:
        cfg.decide("loss", "dft", "use_dft_loss: each token's cross-entropy x its probability (no gradient through "
                   "it), LLaMA-Factory's dft_loss_func")
        return plain(model, weigher=dft_weights)
    if m.use_eaft_loss:
        cfg.decide("loss", "eaft", f"use_eaft_loss: each token's cross-entropy x (top-{EAFT_TOP_K} entropy / 3) ** "
                   f"{m.eaft_alpha}, LLaMA-Factory's eaft_loss_func")
        return plain(model, weigher=eaft_weights(m.eaft_alpha))
    if m.use_asft_loss:
        cfg.decide("loss", "asft", f"use_asft_loss: DFT + {m.asft_alpha} x KL(reference || model) per labelled token "
                   "(LLaMA-Factory's asft_loss_func); the token mean over the whole step (LLaMA-Factory: the sum of "
                   "the micro-batches' means)")
        return ASFTObjective(model, cfg)
    return plain(model)
