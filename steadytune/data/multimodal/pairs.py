"""Preference pairs with images (stage dpo: DPO, ORPO, SimPO...): the prompt's `<image>` / `<video>` placeholders
become the model's media tokens once, and the chosen and the rejected sequence both start with that same prompt, so
both carry the row's images (the collator gives each sequence its pixels: the vision tower encodes them per
sequence, twice per pair, which keeps each forward the model's own).

Truncation follows data/preference.py (LLaMA-Factory's infer_seqlen: prompt and longer answer share cutoff_len) and
never cuts a media token: a prompt shortened below its media tokens keeps them all and loses text instead; a row
whose media tokens alone do not fit is refused with its row.
"""

from __future__ import annotations

from typing import Any

from steadytune.data.encode import IGNORE_INDEX, encode_oneturn, infer_seqlen
from steadytune.data.multimodal.encode import (
    MediaContext,
    _expected_media_tokens,
    _grids,
    _keep,
    _n_media,
    check_placeholders,
    media_inputs,
)
from steadytune.data.templates import Template
from steadytune.errors import DataError


def encode_multimodal_pair(template: Template, ctx: MediaContext, example: dict, cutoff_len: int
                           ) -> tuple[dict | None, tuple[int, int]]:
    """(pair example with its media, (prompt tokens cut, answer tokens cut)); None when no answer token is left.
    The example's per-token lists (input_ids, labels, mm_token_type_ids / token_type_ids) hold the chosen then the
    rejected sequence (`lengths`); `images` / `videos` and the grids are the prompt's, shared by both."""
    where = example.get("where", "row")
    check_placeholders(example, ctx.plugin)
    for side in ("chosen", "rejected"):
        if "<image>" in example[side]["content"] or "<video>" in example[side]["content"]:
            raise DataError(f"{where}: the {side} answer holds an image/video placeholder; a preference row's "
                            "images belong to its prompt (both answers see them)")
    inputs, videos = media_inputs(example, ctx)
    messages = ctx.plugin.expand(example["messages"], inputs, ctx.processor, videos)
    tokenizer = ctx.tokenizer
    prompt, chosen = encode_oneturn(template, tokenizer, messages + [example["chosen"]], example["system"],
                                    example["tools"])
    prompt_r, rejected = encode_oneturn(template, tokenizer, messages + [example["rejected"]], example["system"],
                                        example["tools"])
    if prompt_r != prompt:
        raise DataError(f"{where}: template {template.name} renders the prompt differently before the chosen and "
                        "the rejected answer")
    media_ids = set(ctx.plugin.media_token_ids(tokenizer))
    needed = _n_media(prompt, media_ids)
    if needed != _expected_media_tokens(inputs, ctx):
        raise DataError(f"{where}: the template wrote {needed} media tokens but the processor made features for "
                        f"{_expected_media_tokens(inputs, ctx)}: does the tokenizer know {ctx.plugin.image_token} "
                        "as one token?")
    protected = ctx.plugin.block_token_ids(tokenizer)
    blocks = _n_media(prompt, protected)
    source, target = infer_seqlen(len(prompt), max(len(chosen), len(rejected)), cutoff_len)
    if source < blocks:   # never cut an image: its tokens stay, the prompt's text and the answers give way
        if blocks >= cutoff_len:
            raise DataError(f"{where}: its image/video tokens need {blocks} of cutoff_len {cutoff_len} tokens before "
                            "any answer token; raise cutoff_len or lower image_max_pixels / video_max_pixels")
        source, target = blocks, min(target, cutoff_len - blocks)
    cut = (len(prompt) - source, max(0, len(chosen) - target) + max(0, len(rejected) - target))
    prompt, chosen, rejected = _keep(prompt, source, protected), chosen[:target], rejected[:target]
    if not chosen or not rejected:
        return None, cut
    ids_c, ids_r = prompt + chosen, prompt + rejected
    labels = [IGNORE_INDEX] * len(prompt) + chosen + [IGNORE_INDEX] * len(prompt) + rejected
    out: dict[str, Any] = {"input_ids": ids_c + ids_r, "labels": labels, "lengths": [len(ids_c), len(ids_r)],
                           **ctx.plugin.type_ids(ids_c + ids_r, tokenizer), **_grids(inputs)}
    for key in ("images", "videos"):
        if example.get(key):
            out[key] = list(example[key])
    return out, cut
