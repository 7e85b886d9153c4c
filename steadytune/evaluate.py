"""Classification by label scoring, and the `steadytune eval` subcommand.

A generative classifier answers with a label word. Instead of generating and parsing text, we *score* each
label: the sum of log-probabilities of its full target token sequence (label word + end-of-sequence) after
the prompt. That is exact for labels of several tokens (seed 003's "消极" splits into two) and never
produces an unparseable answer. Generation is kept as an option, to compare with what a user would see.

Speed: one row per (prompt, label) pair, right-padded and sorted by length so a batch carries little
padding; the output head (262k columns for Gemma 3) runs only at the few positions that predict a label
token, never at every position.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F

from steadytune.loss import decoder_body, final_logit_softcap, output_head
from steadytune.metrics import classification_report


def _precision_context(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """bf16/fp16 weights (possibly with fp32 LoRA adapters) run under autocast of that dtype; fp32 runs as is."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    for low in (torch.bfloat16, torch.float16):
        if low in dtypes:
            return torch.autocast(device_type=_device_of(model).type, dtype=low)
    return contextlib.nullcontext()


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _check_scoring_inputs(prompts: Sequence[Sequence[int]], label_targets: Sequence[Sequence[int]]) -> None:
    if not label_targets:
        raise ValueError("no label targets to score")
    for j, target in enumerate(label_targets):
        if len(target) == 0:
            raise ValueError(f"label {j} has an empty target token sequence")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty: the first label token needs a position to be predicted from")


def _score_chunk(model: torch.nn.Module, prompts: list[Sequence[int]], label_targets: Sequence[Sequence[int]],
                 pad_token_id: int, device: torch.device) -> torch.Tensor:
    """[len(prompts), n_labels] summed log-probabilities, one forward pass over every (prompt, label) row."""
    rows = [list(p) + list(t) for p in prompts for t in label_targets]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    # Where each target token sits: position t predicts token t+1, so label token k of a row whose prompt
    # has P tokens is predicted at position P-1+k.
    row_index, position, token = [], [], []
    for r, ids in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        prompt_len = len(prompts[r // len(label_targets)])
        target = label_targets[r % len(label_targets)]
        row_index.extend([r] * len(target))
        position.extend(range(prompt_len - 1, prompt_len - 1 + len(target)))
        token.extend(target)
    # Right padding needs no attention mask: under causal attention no real token ever sees a pad after it,
    # and without a mask SDPA takes its fastest (is_causal) path.
    hidden = decoder_body(model)(input_ids=input_ids.to(device)).last_hidden_state
    row_index_t = torch.tensor(row_index, device=device)
    selected = hidden[row_index_t, torch.tensor(position, device=device)]
    logits = output_head(model)(selected).float()
    cap = final_logit_softcap(model)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    token_logprob = F.log_softmax(logits, dim=-1).gather(1, torch.tensor(token, device=device)[:, None])[:, 0]
    per_row = torch.zeros(len(rows), dtype=torch.float32, device=device).index_add_(0, row_index_t, token_logprob)
    return per_row.view(len(prompts), len(label_targets)).cpu()


def score_labels(model: torch.nn.Module, prompts: Sequence[Sequence[int]], label_targets: Sequence[Sequence[int]],
                 batch_size: int = 32, pad_token_id: int = 0, progress: bool = False) -> torch.Tensor:
    """-> [n_prompts, n_labels]: log P(label's full target sequence | prompt), summed over its tokens.

    `batch_size` counts prompts per forward pass (each carries one row per label). Prompts are scored in
    order of length to cut padding; the result is in the caller's order. The model's train/eval mode is
    restored afterwards, so the training loop can call this between steps.
    """
    _check_scoring_inputs(prompts, label_targets)
    scores = torch.empty(len(prompts), len(label_targets), dtype=torch.float32)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    if progress:
        from tqdm.auto import tqdm
        chunks = tqdm(chunks, desc="scoring labels", unit="batch", dynamic_ncols=True)
    device = _device_of(model)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), _precision_context(model):
            for chunk in chunks:
                scores[chunk] = _score_chunk(model, [prompts[i] for i in chunk], label_targets, pad_token_id, device)
    finally:
        model.train(was_training)
    return scores
