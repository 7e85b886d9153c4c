"""Log-probabilities of answers, summed per sequence, with the output head applied only at answer positions.

This is training/loss.py's path (decoder body once, then the vocabulary projection only where a label is not -100, in
chunks, never holding [tokens, vocabulary] logits) for objectives that need each token's log-probability rather
than one summed loss: DPO and KTO combine per-sequence sums non-linearly, so each token's gradient depends on the
sequence it belongs to, and the chunked cross-entropy of training/loss.py (which makes its gradient in the forward pass for
a scalar upstream gradient) does not apply. `ChunkedLinearLogProb` makes the gradient with respect to the hidden
states in the forward pass too, as a per-row vector that backward scales by each row's upstream gradient.

Sequences are told apart by `segment_ids` (the collators in stages/batches.py add them): the index of the sequence
each position belongs to, -1 on padding; one forward serves any number of sequences, padded or packed.
"""

from __future__ import annotations

import torch

from steadytune.data.encode import IGNORE_INDEX
from steadytune.model.anatomy import final_logit_softcap, output_head, run_body
from steadytune.training.loss import CHUNK_LOGITS, model_inputs, shifted_targets


def hidden_states(model: torch.nn.Module, batch: dict, prefix: str = "") -> torch.Tensor:
    """The decoder's last hidden states [rows, length, hidden] for the batch's sequences (`prefix`: a second set of
    sequences in the same batch, e.g. KTO's "kl_")."""
    # No KV cache in training: it costs memory, and with one transformers ignores packed position ids.
    return run_body(model, model_inputs(batch, prefix), use_cache=False).last_hidden_state


def sequence_logprobs(model: torch.nn.Module, batch: dict, n_sequences: int, prefix: str = ""
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (sum of log p(answer token) per sequence [n_sequences] in fp32, answer tokens per sequence [n_sequences]).

    Position t predicts token t+1; a position counts when token t+1 carries a label, and it belongs to the
    sequence of token t+1 (the same as t's: every sequence starts with an unlabelled token)."""
    hidden = hidden_states(model, batch, prefix)
    if prefix + "target_index" in batch:
        return _listed_logprobs(model, hidden, batch, n_sequences, prefix)
    targets = shifted_targets(batch[prefix + "labels"])
    keep = targets != IGNORE_INDEX
    segments = torch.full_like(targets, -1)
    segments[:, :-1] = batch[prefix + "segment_ids"][:, 1:]
    owner = segments[keep]
    token_logps = labelled_log_probs(output_head(model), hidden[keep], targets[keep], final_logit_softcap(model))
    # fp32 at least (fp64 stays fp64): sums of hundreds of log-probs lose digits in bf16
    sums = torch.zeros(n_sequences, dtype=token_logps.dtype, device=hidden.device).index_add(0, owner, token_logps)
    counts = torch.bincount(owner, minlength=n_sequences)
    if owner.numel() == 0:
        sums = sums + hidden.sum() * 0.0  # keep the graph connected: every rank runs the same backward (DDP)
    return sums, counts


def _listed_logprobs(model: torch.nn.Module, hidden: torch.Tensor, batch: dict, n_sequences: int, prefix: str
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """sequence_logprobs for a packed batch, which lists its labelled positions (`target_index`, `target_ids`;
    packing.target_positions): nothing is read back from the GPU, so the CPU queues ahead and a CUDA graph can
    record it. A static batch pads the list with ignored targets; they go to a slot past the last sequence."""
    index, targets = batch[prefix + "target_index"], batch[prefix + "target_ids"]
    real = targets != IGNORE_INDEX
    owner = batch[prefix + "segment_ids"].reshape(-1).index_select(0, index + 1)
    owner = torch.where(real, owner, torch.full_like(owner, n_sequences))
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)
    token_logps = labelled_log_probs(output_head(model), rows, torch.where(real, targets, torch.zeros_like(targets)),
                                     final_logit_softcap(model))
    token_logps = torch.where(real, token_logps, torch.zeros_like(token_logps))
    sums = torch.zeros(n_sequences + 1, dtype=token_logps.dtype, device=hidden.device).index_add(0, owner, token_logps)
    counts = torch.zeros(n_sequences + 1, dtype=torch.long, device=hidden.device).index_add(0, owner, real.long())
    sums, counts = sums[:n_sequences], counts[:n_sequences]
    if index.numel() == 0:
        sums = sums + hidden.sum() * 0.0  # keep the graph connected: every rank runs the same backward (DDP)
    return sums, counts


def token_logprobs(model: torch.nn.Module, batch: dict, temperature: float = 1.0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (log p(token) of every answer token at `temperature`, fp32 [tokens]; the sequence each belongs to [tokens]),
    in the order the batch lays its tokens out, padded or packed: the same order for any model run on the same batch,
    so that the policy's, the reference's and the sampler's values line up token by token (GRPO's per-token loss)."""
    return answer_logprobs(model, hidden_states(model, batch), batch, temperature)


def answer_logprobs(model: torch.nn.Module, hidden: torch.Tensor, batch: dict, temperature: float = 1.0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """token_logprobs from the decoder's last hidden states [rows, length, hidden] (a caller that runs the body
    itself: GRPO asks a mixture of experts for its router logits in the same forward)."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    if "target_index" in batch:   # packed: the collator listed the labelled positions
        index, targets = batch["target_index"], batch["target_ids"]
        owner = batch["segment_ids"].reshape(-1).index_select(0, index + 1)
    else:
        shifted = shifted_targets(batch["labels"])
        segments = torch.full_like(shifted, -1)
        segments[:, :-1] = batch["segment_ids"][:, 1:]
        index = (shifted != IGNORE_INDEX).reshape(-1).nonzero().squeeze(1)
        targets, owner = shifted.reshape(-1)[index], segments.reshape(-1)[index]
    logps = labelled_log_probs(output_head(model), flat.index_select(0, index), targets, final_logit_softcap(model),
                               temperature=temperature)
    if logps.numel() == 0:
        logps = logps + hidden.sum() * 0.0  # keep the graph connected: every rank runs the same backward (DDP)
    return logps, owner


def labelled_log_probs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                       softcap: float | None = None, chunk_rows: int | None = None,
                       temperature: float = 1.0) -> torch.Tensor:
    """log softmax(head(hidden) / temperature)[target] for each row, fp32 [rows], without keeping [rows, vocabulary]
    logits. The temperature divides the (soft-capped) logits, as sampling at that temperature does: GRPO scores its
    completions at the temperature they were sampled at (TRL does the same).

    A bias-free linear head (every supported family) goes through the chunked kernel; anything else (a LoRA-wrapped
    head) through plain log_softmax."""
    if type(head) is not torch.nn.Linear or head.bias is not None:
        logits = head(hidden).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        if temperature != 1.0:
            logits = logits / temperature
        return logits.log_softmax(-1).gather(1, targets[:, None])[:, 0]
    rows = chunk_rows or max(1, CHUNK_LOGITS // head.weight.shape[0])
    return ChunkedLinearLogProb.apply(hidden, head.weight, targets, softcap, rows, temperature)


class ChunkedLinearLogProb(torch.autograd.Function):
    """log p(target) of `hidden @ weight.T` per row, `rows` rows of logits at a time.

    Forward: for each chunk, logits -> log-probability of the target; since d logp / d logits = onehot - softmax,
    the gradient with respect to the chunk's hidden rows, (onehot - softmax) @ weight, is made at once and the
    logits freed. Backward scales those rows by the upstream gradient of each row (per-row, so any function of
    the per-sequence sums can follow). The gradient of a trainable head (full fine-tuning) needs the upstream
    gradient inside the sum over rows, so it is recomputed chunk by chunk in backward.
    Matches log_softmax on the full logits (same matmul dtype, softmax in fp32)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, softcap, rows, temperature=1.0):
        device_type = hidden.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weight.dtype
        acc = torch.promote_types(dtype, torch.float32)
        need_hidden_grad, need_weight_grad = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        out = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
        grad_rows = torch.empty_like(hidden) if need_hidden_grad else None
        with torch.autocast(device_type, enabled=False):
            w = weight.to(dtype)
            for start in range(0, hidden.shape[0], rows):
                logits, capped = _chunk_logits(hidden[start:start + rows], w, softcap, acc, temperature)
                target = targets[start:start + rows]
                lse = torch.logsumexp(logits, dim=-1)
                out[start:start + rows] = logits.gather(1, target[:, None])[:, 0] - lse
                if need_hidden_grad:
                    grad = _onehot_minus_softmax(logits, lse, target, capped, softcap, temperature)
                    grad_rows[start:start + rows] = (grad.to(dtype) @ w).to(hidden.dtype)
        ctx.rows, ctx.softcap, ctx.dtype, ctx.acc, ctx.temperature = rows, softcap, dtype, acc, temperature
        ctx.save_for_backward(grad_rows, hidden if need_weight_grad else None,
                              weight if need_weight_grad else None, targets if need_weight_grad else None)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grad_rows, hidden, weight, targets = ctx.saved_tensors
        grad_hidden = grad_weight = None
        if grad_rows is not None:
            grad_hidden = grad_rows * grad_out[:, None].to(grad_rows.dtype)
        if weight is not None:
            grad_weight = torch.zeros(weight.shape, dtype=ctx.acc, device=weight.device)
            with torch.autocast(hidden.device.type, enabled=False):
                w = weight.to(ctx.dtype)
                for start in range(0, hidden.shape[0], ctx.rows):
                    h = hidden[start:start + ctx.rows]
                    logits, capped = _chunk_logits(h, w, ctx.softcap, ctx.acc, ctx.temperature)
                    lse = torch.logsumexp(logits, dim=-1)
                    grad = _onehot_minus_softmax(logits, lse, targets[start:start + ctx.rows], capped, ctx.softcap,
                                                 ctx.temperature)
                    grad.mul_(grad_out[start:start + ctx.rows, None].to(ctx.acc))
                    grad_weight += (grad.to(ctx.dtype).T @ h.to(ctx.dtype)).to(ctx.acc)
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def _chunk_logits(h: torch.Tensor, w: torch.Tensor, softcap: float | None, acc: torch.dtype,
                  temperature: float = 1.0):
    logits = (h.to(w.dtype) @ w.T).to(acc)
    capped = None
    if softcap:
        capped = torch.tanh(logits / softcap)
        logits = capped * softcap
    if temperature != 1.0:
        logits = logits / temperature
    return logits, capped


def _onehot_minus_softmax(logits, lse, target, capped, softcap, temperature: float = 1.0) -> torch.Tensor:
    """d log p(target) / d pre-cap logits, over the chunk's logits buffer."""
    grad = logits.sub_(lse[:, None]).exp_().neg_()
    grad[torch.arange(len(target), device=grad.device), target] += 1.0
    if temperature != 1.0:
        grad.div_(temperature)
    if softcap:
        grad.mul_(1.0 - capped * capped)
    return grad


def last_positions(batch: dict, n_sequences: int, prefix: str = "") -> torch.Tensor:
    """Flat index (row * length + position) of each sequence's last token: where a reward model reads its score."""
    segments = batch[prefix + "segment_ids"]
    flat = segments.reshape(-1)
    index = torch.arange(flat.numel(), device=flat.device)
    real = flat >= 0
    last = torch.full((n_sequences,), -1, dtype=torch.long, device=flat.device)
    return last.scatter_reduce(0, flat[real], index[real], reduce="amax")
