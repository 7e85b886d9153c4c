"""Tokenise normalised examples into input_ids + labels (-100 where no loss is taken).

Conversations follow LLaMA-Factory's supervised processor exactly (truncation shares `cutoff_len` between each
prompt and its answer, `mask_history` keeps the last turns first, `efficient_eos` templates label the next turn's
first token with eos); `tests/test_template_golden.py` checks the ids and labels against LLaMA-Factory's own.
Classification rows are ours: the prompt is rendered by the template around `{text}`, so the prompt used in
training is exactly the one `evaluate` rebuilds with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steadytune.config import ConfigError
from steadytune.data.templates import Template, encode_parts, split_prompt, tokenizer_adds_bos

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Truncation:
    """What cutoff_len cut from one example: prompt-side and answer-side tokens (later turns dropped included)."""
    prompt_tokens: int
    answer_tokens: int


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def _prompt_chrome(template: Template, tokenizer: Any, prompt_template: str) -> tuple[list[int], list[int]]:
    """Token ids of the rendered prompt before and after `{text}`; cached on the template (same every row).

    A classification row is our own format (not LLaMA-Factory's): its prompt is the template's one-turn prompt,
    with the tokenizer's bos in front when the template puts none there and the tokenizer adds one to plain text
    (`template: empty` on Gemma), so a base model reads the prompt as it read its pre-training text."""
    cache = template.__dict__.setdefault("_chrome_cache", {})
    key = (id(tokenizer), prompt_template)
    if key not in cache:
        before, after = split_prompt(template, prompt_template)
        before_ids = encode_parts(tokenizer, before)
        if tokenizer_adds_bos(tokenizer) and (not before_ids or before_ids[0] != tokenizer.bos_token_id):
            before_ids = [tokenizer.bos_token_id] + before_ids
        cache[key] = (before_ids, encode_parts(tokenizer, after))
    return cache[key]


def classification_fixed_len(template: Template, tokenizer: Any, prompt_template: str) -> int:
    """Prompt tokens that are not the row's text: the least a classification prompt can be."""
    before, after = _prompt_chrome(template, tokenizer, prompt_template)
    return len(before) + len(after)


def encode_classification_prompt(template: Template, tokenizer: Any, prompt_template: str, text: str,
                                 max_prompt_len: int, text_ids: list[int] | None = None) -> list[int]:
    """Prompt ids of one row: the text is truncated (its end is cut) so the prompt fits `max_prompt_len`."""
    before, after = _prompt_chrome(template, tokenizer, prompt_template)
    budget = max_prompt_len - len(before) - len(after)
    if budget < 1:
        raise ConfigError(f"max_prompt_len {max_prompt_len} cannot hold the prompt: it needs at least "
                          f"{len(before) + len(after) + 1} tokens (template + prompt_template + 1 text token)")
    ids = encode_text(tokenizer, text) if text_ids is None else text_ids
    return before + ids[:budget] + after


def encode_label_targets(template: Template, tokenizer: Any, label_names: list[str]) -> list[list[int]]:
    """Each label's trained ids: the label word followed by the template's end token."""
    return [encode_parts(tokenizer, template.answer_parts(name)) for name in label_names]


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """How much of a prompt and its answer fit in `cutoff_len` tokens (LLaMA-Factory's rule): a short answer is
    kept whole and the prompt cut; a short prompt is kept whole and the answer cut; otherwise both are cut in
    proportion to their lengths."""
    if target_len * 2 < cutoff_len:
        max_target = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target = cutoff_len - source_len
    else:
        max_target = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target = min(max_target, target_len)
    new_source = min(max(cutoff_len - new_target, 0), source_len)
    return new_source, new_target


def add_turn(template: Template, input_ids: list[int], labels: list[int], turn: int, source: list[int],
             target: list[int], train_on_prompt: bool, mask_history: bool) -> tuple[list[int], list[int]]:
    """One kept (prompt, answer) pair added with LLaMA-Factory's labels: the prompt trained only under train_on_prompt,
    the answer unless mask_history hides every turn but the last (whose pairs come reversed, so it is prepended)."""
    eos = template.eos_token_id
    if train_on_prompt:
        source_labels = list(source)
    elif template.efficient_eos and turn != 0:
        # The previous answer carries no end token: its eos is learnt at this turn's first position.
        source_labels = ([eos] + [IGNORE_INDEX] * (len(source) - 1))[:len(source)]
    else:
        source_labels = [IGNORE_INDEX] * len(source)
    target_labels = [IGNORE_INDEX] * len(target) if (mask_history and turn != 0) else list(target)
    if mask_history:
        return source + target + input_ids, source_labels + target_labels + labels
    return input_ids + source + target, labels + source_labels + target_labels


def close_turns(template: Template, input_ids: list[int], labels: list[int], pairs: list, kept_source: int,
                kept_target: int, truncated: bool) -> Truncation | None:
    """The efficient-eos template's closing eos appended (in place); what cutoff_len cut of `pairs`, or None."""
    if template.efficient_eos:
        input_ids.append(template.eos_token_id)
        labels.append(template.eos_token_id)
    if not truncated:
        return None
    return Truncation(sum(len(s) for s, _ in pairs) - kept_source, sum(len(t) for _, t in pairs) - kept_target)


def encode_conversation(template: Template, tokenizer: Any, example: dict, cutoff_len: int,
                        train_on_prompt: bool = False, mask_history: bool = False
                        ) -> tuple[dict | None, Truncation | None]:
    """(example with input_ids/labels, what cutoff_len cut or None); the example is None when no trained token
    survives cutoff_len."""
    if train_on_prompt and template.efficient_eos:
        raise ConfigError(f"train_on_prompt: template {template.name} ends answers with the next turn's first "
                          "token (efficient eos), which cannot be combined with training on the prompt")
    pairs = template.encode_pairs(tokenizer, example["messages"], example.get("system"), example.get("tools"),
                                  mask_history)
    input_ids: list[int] = []
    labels: list[int] = []
    total = 1 if template.efficient_eos else 0
    truncated = False
    kept_source = kept_target = 0
    if mask_history:
        pairs = pairs[::-1]  # the last turns are kept first when the conversation does not fit
    for turn, (source, target) in enumerate(pairs):
        if total >= cutoff_len:
            truncated = True
            break
        source_len, target_len = infer_seqlen(len(source), len(target), cutoff_len - total)
        truncated |= (source_len, target_len) != (len(source), len(target))
        source, target = source[:source_len], target[:target_len]
        total += source_len + target_len
        kept_source, kept_target = kept_source + source_len, kept_target + target_len
        input_ids, labels = add_turn(template, input_ids, labels, turn, source, target, train_on_prompt, mask_history)
    cut = close_turns(template, input_ids, labels, pairs, kept_source, kept_target, truncated)
    if all(label == IGNORE_INDEX for label in labels):
        return None, cut
    return {"input_ids": input_ids, "labels": labels}, cut


def encode_oneturn(template: Template, tokenizer: Any, messages: list[dict], system: str | None = None,
                   tools: str | None = None) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids): the conversation up to its last answer, and that answer (with eos for
    efficient-eos templates), as LLaMA-Factory's one-turn encoding builds them (earlier think blocks dropped)."""
    encoded = [encode_parts(tokenizer, parts) for parts in
               template.message_parts(messages, system, tools, mask_history=True)]
    prompt = [token for ids in encoded[:-1] for token in ids]
    return prompt, encoded[-1] + ([template.eos_token_id] if template.efficient_eos else [])


def encode_prediction(template: Template, tokenizer: Any, example: dict, cutoff_len: int) -> tuple[list[int], list[int]]:
    """(prompt ids, reference answer ids) for do_predict, as LLaMA-Factory encodes its evaluation rows: the whole
    conversation up to the last answer is the prompt, the last answer the reference; both cut to fit cutoff_len."""
    messages = example["messages"]
    if messages[-1]["role"] not in ("assistant", "function_call"):
        messages = messages + [{"role": "assistant", "content": ""}]
    prompt, answer = encode_oneturn(template, tokenizer, messages, example.get("system"), example.get("tools"))
    prompt_len, answer_len = infer_seqlen(len(prompt), len(answer), cutoff_len)
    return prompt[:prompt_len], answer[:answer_len]


def encode_classification(template: Template, tokenizer: Any, prompt_template: str, text_ids: list[int],
                          target_ids: list[int], max_prompt_len: int, train_on_prompt: bool) -> dict:
    prompt = encode_classification_prompt(template, tokenizer, prompt_template, "", max_prompt_len, text_ids)
    labels = (prompt if train_on_prompt else [IGNORE_INDEX] * len(prompt)) + target_ids
    return {"input_ids": prompt + target_ids, "labels": labels}
