"""The training loss: summed next-token cross-entropy over the positions that carry a label.

The output head is applied only where a label is not ignored. For generative classification that is one or
two positions per example instead of every position; with a 262k-entry vocabulary (Gemma 3) the head is most
of the compute, so this is the single biggest saving on CPU and GPU alike (DESIGN.md: 15.0 s -> 4.5 s a step).

The loss is returned as a *sum* with its token count, so that the loop can normalise over every token of an
accumulation window (not per micro-batch, which would over-weight short micro-batches).
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
import torch.nn.functional as F

from steadytune.data.encode import IGNORE_INDEX
from steadytune.model import kernels
from steadytune.model.anatomy import final_logit_softcap, output_head, run_body
from steadytune.model.attention import packed_mask_placeholder
from steadytune.model.moe.routing import routing_of, routing_token_mask
from steadytune.model.media_features import FEATURE_KEYS, LAYOUT_KEYS
from steadytune.model.tiling import tiling_of
from steadytune.model.vision import VISION_INPUT_KEYS
from steadytune.model.kernels import FUSED_CHUNK_FLAG


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1: shift labels left and ignore the last position."""
    targets = torch.full_like(labels, IGNORE_INDEX)
    targets[:, :-1] = labels[:, 1:]
    return targets


# Rows of the head's output computed at once: 2**27 fp32 logits (512 MiB) at most, whatever the vocabulary size,
# so the loss's memory stays flat however many labelled tokens a step has.
CHUNK_LOGITS = 2**27
# Keys of a batch that the decoder takes (the cu_seq_lens/max_length ones drive the varlen packing attention).
# A vision-language model's batch adds its pixels and image grids (model/vision.py: VISION_INPUT_KEYS), or the features
# its frozen vision tower made of them before the step (model/media_features.py: FEATURE_KEYS).
MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "position_ids",
                    "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", *VISION_INPUT_KEYS,
                    *FEATURE_KEYS, *LAYOUT_KEYS)


def model_inputs(batch: dict, prefix: str = "") -> dict:
    """The decoder's inputs from a batch (`prefix`: a second set of sequences in it, e.g. KTO's "kl_"). A varlen
    row gets a placeholder attention mask: its kernel reads cu_seq_lens, and without one transformers would look
    for packed sequences in the position ids, reading the GPU back."""
    inputs = {k: batch[prefix + k] for k in MODEL_INPUT_KEYS if prefix + k in batch}
    if "cu_seq_lens_q" in inputs and "attention_mask" not in inputs:
        inputs["attention_mask"] = packed_mask_placeholder(inputs["input_ids"])
    return inputs


def causal_lm_loss_sum(model: torch.nn.Module, batch: dict, token_weights: torch.Tensor | None = None,
                       weigher=None) -> tuple[torch.Tensor, int]:
    """-> (sum of per-token cross-entropy over labelled positions, number of labelled positions).

    token_weights, when given, has the shape of `labels` and weighs each *target* token (class-balanced loss).
    A batch from PackedCollator names its labelled positions itself (`target_index`, `target_ids`, `n_targets`):
    then nothing here reads a value back from the GPU, so the CPU can queue the whole step ahead of the GPU
    (and a CUDA graph can record it). `weigher(head, rows, targets, softcap)`, when given, weighs each labelled
    token (no gradient through the weight): the DFT and EAFT losses (stages/sft_losses.py).
    """
    # No KV cache in training: it costs memory, and with one transformers ignores packed position ids and would
    # let packed examples attend to each other. A mixture of experts also returns its router logits: the routers'
    # load-balancing loss and routing statistics (model/moe/routing.py).
    inputs = model_inputs(batch)
    routing = routing_of(model)
    tiling = tiling_of(model)
    if tiling is not None and routing is None and token_weights is None and weigher is None and tiling.takes(inputs):
        return _tiled_loss_sum(model, tiling, inputs, batch)
    extra = {"output_router_logits": True} if routing is not None else {}
    outputs = run_body(model, inputs, use_cache=False, **extra)
    hidden = outputs.last_hidden_state
    loss_sum, n_tokens = _labelled_loss_sum(model, hidden, batch, token_weights, weigher)
    if routing is not None:
        aux = routing.add(outputs.router_logits, routing_token_mask(batch), n_tokens)
        if aux is not None:
            loss_sum = loss_sum + aux
    return loss_sum, n_tokens


def _tiled_loss_sum(model: torch.nn.Module, tiling, inputs: dict, batch: dict) -> tuple[torch.Tensor, int]:
    """causal_lm_loss_sum for a long micro-batch: the decoder layers, the final norm and the loss a tile of tokens at
    a time (model/tiling.py), so that its activation memory is its layers' inputs."""
    with tiling.running(inputs):
        hidden = run_body(model, tiling.body_inputs(inputs), use_cache=False).last_hidden_state   # not normed yet
    index, ids, n_tokens = target_rows(batch)
    if n_tokens == 0:
        return hidden.sum() * 0.0, 0
    softcap = final_logit_softcap(model)

    def cross_entropy(head, rows, targets):
        return labelled_cross_entropy_sum(head, rows, targets, softcap=softcap)

    return tiling.loss_sum(model, hidden, index, ids, cross_entropy), n_tokens


def target_rows(batch: dict) -> tuple[torch.Tensor, torch.Tensor, int]:
    """-> (positions of the flattened rows that carry a target, ascending; their targets; how many): the collator's
    target_index where it made one, else from the labels."""
    if "target_index" in batch:
        n = int(batch["n_targets"])
        return batch["target_index"][:n], batch["target_ids"][:n], n
    targets = shifted_targets(batch["labels"]).flatten()
    index = (targets != IGNORE_INDEX).nonzero().flatten()
    return index, targets[index], int(index.numel())


def _labelled_loss_sum(model: torch.nn.Module, hidden: torch.Tensor, batch: dict,
                       token_weights: torch.Tensor | None, weigher=None) -> tuple[torch.Tensor, int]:
    rows, targets, weights, n_tokens = labelled_rows(hidden, batch, token_weights)
    if rows is None:
        # Still touch the graph so every rank runs the same backward (DDP needs it).
        return hidden.sum() * 0.0, 0
    head, softcap = output_head(model), final_logit_softcap(model)
    if weigher is not None:
        with torch.no_grad():
            weighed = weigher(head, rows, targets, softcap)
        weights = weighed if weights is None else weights * weighed
    return labelled_cross_entropy_sum(head, rows, targets, weights, softcap), n_tokens


def labelled_rows(hidden: torch.Tensor, batch: dict, token_weights: torch.Tensor | None = None):
    """-> (hidden rows at the labelled positions, their targets, their token weights or None, how many); rows is
    None when nothing in the micro-batch is labelled. A packed batch's rows may hold IGNORE_INDEX padding targets."""
    if "target_index" in batch and token_weights is None:
        rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, batch["target_index"])
        return rows, batch["target_ids"], None, int(batch["n_targets"])
    targets = shifted_targets(batch["labels"])
    keep = targets != IGNORE_INDEX
    n_tokens = int(keep.sum())
    if n_tokens == 0:
        return None, None, None, 0
    weights = None
    if token_weights is not None:
        weights = torch.ones_like(targets, dtype=torch.float32)
        weights[:, :-1] = token_weights[:, 1:].float()
        weights = weights[keep]
    return hidden[keep], targets[keep], weights, n_tokens


# Set while a CUDA graph is recorded or warmed up (graphs.py): liger's fused cross-entropy reads a count back from
# the GPU (.item()), which a graph cannot hold, so ours runs instead.
_NO_HOST_SYNC = contextvars.ContextVar("steadytune_no_host_sync", default=False)


@contextlib.contextmanager
def no_host_sync():
    token = _NO_HOST_SYNC.set(True)
    try:
        yield
    finally:
        _NO_HOST_SYNC.reset(token)


def labelled_cross_entropy_sum(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                               weights: torch.Tensor | None = None, softcap: float | None = None,
                               chunk_rows: int | None = None) -> torch.Tensor:
    """Sum over rows of (weighted) cross-entropy of head(hidden) against targets, without keeping logits.

    A bias-free linear head (every supported model family) goes through a chunked fused kernel: liger-kernel's
    on a GPU where it is installed, else ours; anything else (a LoRA-wrapped head) through the plain path.
    Rows whose target is IGNORE_INDEX (the padding of a static shape) add nothing, to the loss or the gradients.
    """
    rows = chunk_rows or max(1, CHUNK_LOGITS // head.weight.shape[0])
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return _plain_cross_entropy_sum(head(hidden), targets, weights, softcap)
    use_liger = hidden.is_cuda and weights is None and not _NO_HOST_SYNC.get()
    liger = _liger_fused_linear_cross_entropy() if use_liger else None
    if liger is not None:
        return liger(hidden.to(head.weight.dtype), head.weight, targets, ignore_index=IGNORE_INDEX,
                     reduction="sum", softcap=softcap)
    fused = hidden.is_cuda and getattr(head, FUSED_CHUNK_FLAG, False)
    return ChunkedLinearCrossEntropy.apply(hidden, head.weight, targets, weights, softcap, rows, fused)
_compiled_chunk = None


def chunk_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor, row_weights: torch.Tensor,
                        softcap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk's weighted loss sum and d loss / d logits before the row weights (softmax minus one-hot), the
    gradient in the logits' dtype. targets: already clamped to >= 0 (the ignored rows weigh 0).

    The same arithmetic as _eager_chunk_loss_and_grad, written out of place so that torch.compile fuses it into a
    reduction and one pointwise pass over the chunk's logits. Eager PyTorch makes about eight passes over an
    fp32 copy (cast, max, subtract, exp, sum, subtract in place, exp, cast back): with Qwen's 152k vocabulary at
    16k tokens a step on an H200 that was 34 ms a step against 19 ms for the head's two matrix multiplies."""
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    capped = None
    if softcap:
        capped = torch.tanh(x / softcap)
        x = capped * softcap
    lse = torch.logsumexp(x, dim=-1)
    picked = x.gather(1, targets[:, None])[:, 0]
    loss = ((lse - picked) * row_weights).sum()
    columns = torch.arange(x.shape[1], device=x.device)
    grad = torch.exp(x - lse[:, None]) - (columns[None, :] == targets[:, None]).to(x.dtype)
    if capped is not None:
        grad = grad * (1.0 - capped * capped)
    return loss, grad.to(logits.dtype)


def _eager_chunk_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor, row_weights: torch.Tensor,
                               softcap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """chunk_loss_and_grad for eager PyTorch: in place over one fp32 copy of the logits, so that a chunk costs two
    [rows, vocabulary] buffers at most (written out of place, eager would allocate one per operation)."""
    acc = torch.promote_types(logits.dtype, torch.float32)
    x = logits.to(acc)
    capped = None
    if softcap:
        capped = torch.tanh(x / softcap)
        x = capped * softcap
    lse = torch.logsumexp(x, dim=-1)
    loss = ((lse - x.gather(1, targets[:, None])[:, 0]) * row_weights).sum()
    grad = x.sub_(lse[:, None]).exp_()
    grad[torch.arange(len(targets), device=grad.device), targets] -= 1.0
    if capped is not None:
        grad.mul_(1.0 - capped * capped)
    return loss, grad.to(logits.dtype)


def _fused_chunk():
    """chunk_loss_and_grad compiled once, for every chunk size (the last chunk of a step is shorter)."""
    global _compiled_chunk
    if _compiled_chunk is None:
        _compiled_chunk = torch.compile(chunk_loss_and_grad, dynamic=True, backend=kernels.COMPILE_BACKEND)  # read at call time: tests swap in a counting one
    return _compiled_chunk


def _plain_cross_entropy_sum(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None,
                             softcap: float | None) -> torch.Tensor:
    logits = logits.float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    per_token = F.cross_entropy(logits, targets, reduction="none", ignore_index=IGNORE_INDEX)
    return (per_token * weights).sum() if weights is not None else per_token.sum()


def _liger_fused_linear_cross_entropy():
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
    except ImportError:
        return None
    return liger_fused_linear_cross_entropy


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Cross-entropy of `hidden @ weight.T`, computed `rows` at a time; gradients are made in the forward pass.

    Each chunk's logits live only while that chunk is processed: the softmax minus the one-hot target *is* the
    gradient of the loss with respect to the logits, so it is multiplied back through the head at once and the
    logits are freed. Peak extra memory is one chunk of logits instead of [tokens, vocabulary]; there is no
    recomputation. Matches F.cross_entropy on the full logits (same dtype for the matmul, fp32 softmax).
    Ignored rows (target IGNORE_INDEX) are masked on the small [rows, hidden] side, never on the logits.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, weights, softcap, rows, fused=False):
        device_type = hidden.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weight.dtype
        w = weight.to(dtype)
        acc = torch.promote_types(dtype, torch.float32)  # softmax in fp32 at least (fp64 stays fp64 in tests)
        need_hidden_grad, need_weight_grad = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if need_hidden_grad else None
        grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_weight_grad else None
        total = torch.zeros((), dtype=acc, device=hidden.device)
        chunk = _fused_chunk() if fused else _eager_chunk_loss_and_grad
        with torch.autocast(device_type, enabled=False):
            for start in range(0, hidden.shape[0], rows):
                h = hidden[start:start + rows].to(dtype)
                target = targets[start:start + rows]
                valid = target != IGNORE_INDEX
                target = target.clamp_min(0)
                row_weights = valid.to(acc)
                if weights is not None:
                    row_weights = row_weights * weights[start:start + rows].to(acc)
                chunk_loss, grad = chunk(h @ w.T, target, row_weights, softcap)
                total += chunk_loss
                # Row weights (and the ignored rows' zeros) scale the chunk's gradient rows: applied to the small
                # [rows, hidden] operands instead of the [rows, vocabulary] gradient.
                if need_hidden_grad:
                    grad_hidden[start:start + rows] = ((grad @ w).to(acc) * row_weights[:, None]).to(hidden.dtype)
                if need_weight_grad:
                    grad_weight += (grad.T @ (h * row_weights[:, None]).to(dtype)).to(acc)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_total.to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_total).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def count_target_tokens(batch: dict) -> int:
    if "n_targets" in batch:   # the collator counted them (a packed row; a process's slice of a split row)
        return int(batch["n_targets"])
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
