"""The training loss: summed next-token cross-entropy over the positions that carry a label.

The output head is applied only where a label is not ignored. For generative classification that is one or
two positions per example instead of every position; with a 262k-entry vocabulary (Gemma 3) the head is most
of the compute, so this is the single biggest saving on CPU and GPU alike (DESIGN.md: 15.0 s -> 4.5 s a step).

The loss is returned as a *sum* with its token count, so that the loop can normalise over every token of an
accumulation window (not per micro-batch, which would over-weight short micro-batches).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The vocabulary projection of a (possibly peft-wrapped) causal LM."""
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings")
    return head


def decoder_body(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer stack without the head: `model.model` for HF causal LMs, through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder() if hasattr(base, "get_decoder") else base.model


def final_logit_softcap(model: torch.nn.Module) -> float | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base.config, "final_logit_softcapping", None)


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1: shift labels left and ignore the last position."""
    targets = torch.full_like(labels, IGNORE_INDEX)
    targets[:, :-1] = labels[:, 1:]
    return targets


def causal_lm_loss_sum(model: torch.nn.Module, batch: dict, token_weights: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, int]:
    """-> (sum of per-token cross-entropy over labelled positions, number of labelled positions).

    token_weights, when given, has the shape of `labels` and weighs each *target* token (class-balanced loss).
    """
    model_inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    hidden = decoder_body(model)(**model_inputs).last_hidden_state
    targets = shifted_targets(batch["labels"])
    keep = targets != IGNORE_INDEX
    n_tokens = int(keep.sum())
    if n_tokens == 0:
        # Still touch the graph so every rank runs the same backward (DDP needs it).
        return hidden.sum() * 0.0, 0
    logits = output_head(model)(hidden[keep]).float()
    cap = final_logit_softcap(model)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    per_token = F.cross_entropy(logits, targets[keep], reduction="none")
    if token_weights is not None:
        weights = torch.ones_like(targets, dtype=per_token.dtype)
        weights[:, :-1] = token_weights[:, 1:].to(per_token.dtype)
        per_token = per_token * weights[keep]
    return per_token.sum(), n_tokens


def count_target_tokens(batch: dict) -> int:
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
