"""Prompts -> answers for chat, predict and `eval --mode generate`, on the same engine as serve and GRPO.

`generate_all` keeps up to `max_rows` rows decoding and admits the next prompts as rows finish (continuous batching:
a long answer does not hold a batch of short ones back), shortest prompts first; `stream` decodes one prompt and
yields its tokens as they come back (every few steps). Both reuse one Decoder per model (its slot cache, recorded
steps and LoRA banks), refreshing the banks from the adapter at each call. Sampled rows draw from keys made from
`seed` and the prompt's index, so a seeded run gives the same answers whatever the batch.
"""

from __future__ import annotations

import secrets
import weakref
from collections import deque
from typing import Callable, Iterator, Optional, Sequence

import torch

from steadytune.model.decode.batch import DecodeBatch
from steadytune.model.decode.complete import PREFILL_TOKEN_BUDGET, Completions, Decoder
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.sampling import SamplingParams, mix_key

_decoders: "weakref.WeakKeyDictionary[torch.nn.Module, Decoder]" = weakref.WeakKeyDictionary()


def decoder_for(model: torch.nn.Module, pad_token_id: int) -> Decoder:
    """The model's Decoder (made once: its cache and recorded steps serve every later call)."""
    decoder = _decoders.get(model)
    if decoder is None or decoder.pad_token_id != pad_token_id:
        decoder = _decoders[model] = Decoder(model, pad_token_id)
    return decoder


def keys_for(count: int, seed: Optional[int]) -> list[int]:
    if seed is None:
        return [secrets.randbits(63) for _ in range(count)]
    return [mix_key(seed, i) for i in range(count)]


@torch.inference_mode()
def generate_all(model: torch.nn.Module, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 pad_token_id: int, max_rows: int = 32, seed: Optional[int] = None,
                 on_finished: Optional[Callable[[int], None]] = None) -> Completions:
    """Every prompt's answer (up to and including its first stop token: params.stop_token_ids). The caller sets the
    model's mode and precision (eval.scoring's inference context). `on_finished(n)`: n more answers are done."""
    decoder = decoder_for(model, pad_token_id)
    batch = decoder.batch
    if isinstance(batch, DecodeBatch):
        batch.refresh_adapters()   # an optimizer step or a loaded adapter since the last call
    keys = keys_for(len(prompts), seed)
    rows = [Row(list(p), decoder.adapter, owner=i, params=params, key=keys[i]) for i, p in enumerate(prompts)]
    pending = deque(sorted(rows, key=lambda r: len(r.prompt_ids)))
    tokens: list[list[int]] = [[] for _ in rows]
    try:
        while pending or batch.rows:
            if pending and len(batch.rows) < max_rows and batch.can_admit():
                batch.add(_next_rows(pending, max_rows - len(batch.rows)))
            stepping = batch.needs_step()
            if stepping:
                batch.step()
            finished = 0
            for update in batch.poll(wait=not stepping):
                tokens[update.row.owner].extend(update.tokens)
                finished += update.finished is not None
            if finished and on_finished is not None:
                on_finished(finished)
            batch.keep([k for k, r in enumerate(batch.rows) if r.finished is None])
    finally:
        batch.keep([])
    return Completions(tokens, [r.finished != "stop" for r in rows], [r.finished == "failed" for r in rows])


@torch.inference_mode()
def stream(model: torch.nn.Module, prompt: Sequence[int], params: SamplingParams, pad_token_id: int,
           seed: Optional[int] = None) -> Iterator[list[int]]:
    """One prompt's answer, yielded in pieces of tokens as they are read back; a stop token ends it (and is
    yielded). Raises RuntimeError when the model's logits were not finite."""
    decoder = decoder_for(model, pad_token_id)
    batch = decoder.batch
    if isinstance(batch, DecodeBatch):
        batch.refresh_adapters()   # an optimizer step or a loaded adapter since the last call
    row = Row(list(prompt), decoder.adapter, owner=0, params=params, key=keys_for(1, seed)[0])
    try:
        batch.add([row])
        while row.finished is None:
            stepping = batch.needs_step()
            if stepping:
                batch.step()
            for update in batch.poll(wait=not stepping):
                if update.tokens:
                    yield update.tokens
            if row.finished == "failed":
                raise RuntimeError("the model's output was not finite (nan or inf): the answer cannot be sampled")
    finally:
        batch.keep([])


def _next_rows(pending: deque, room: int) -> list[Row]:
    """The next waiting rows, at most `room`, whose padded prefill stays within the token budget (one at least)."""
    chosen, longest = [], 0
    while pending and len(chosen) < room:
        width = max(longest, len(pending[0].prompt_ids))
        if chosen and (len(chosen) + 1) * width > PREFILL_TOKEN_BUDGET:
            break
        chosen.append(pending.popleft())
        longest = width
    return chosen


def params_from_generate_kwargs(kwargs: dict, stop_ids: Sequence[int]) -> Optional[SamplingParams]:
    """SamplingParams for transformers-style generation settings (infer.generate.Sampling.generate_kwargs), or None
    for what the engine does not do (beam search)."""
    if int(kwargs.get("num_beams") or 1) > 1:
        return None
    sample = bool(kwargs.get("do_sample"))
    top_k = kwargs.get("top_k")
    return SamplingParams(max_tokens=int(kwargs["max_new_tokens"]),
                          temperature=float(kwargs.get("temperature") or 1.0) if sample else 0.0,
                          top_p=float(kwargs.get("top_p") or 1.0) if sample else 1.0,
                          top_k=int(top_k) if sample and top_k else -1,
                          repetition_penalty=float(kwargs.get("repetition_penalty") or 1.0),
                          stop_token_ids=frozenset(stop_ids))
