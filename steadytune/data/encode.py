"""Tokenise normalised examples into input_ids + labels (-100 where no loss is taken).

Text is tokenised piece by piece (see templates.py), so prompt/answer borders fall between tokens and the
classification prompt used in training is exactly the one `evaluate` rebuilds with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steadytune.config import ConfigError
from steadytune.data.templates import Piece, Template, split_prompt

IGNORE = -100


@dataclass(frozen=True)
class Truncation:
    """What cutoff_len cut from one example: prompt-side and answer-side tokens (later turns dropped included)."""
    prompt_tokens: int
    answer_tokens: int


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def _prompt_chrome(template: Template, tokenizer: Any, prompt_template: str) -> tuple[list[int], list[int]]:
    """Token ids of the rendered prompt before and after `{text}`; cached on the template (same every row)."""
    cache = template.__dict__.setdefault("_chrome_cache", {})
    key = (id(tokenizer), prompt_template)
    if key not in cache:
        before, after = split_prompt(template, prompt_template)
        cache[key] = (encode_text(tokenizer, before), encode_text(tokenizer, after))
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
    return [encode_text(tokenizer, template.answer_target(name)) for name in label_names]


def encode_conversation(template: Template, tokenizer: Any, example: dict, cutoff_len: int,
                        train_on_prompt: bool = False, mask_history: bool = False
                        ) -> tuple[dict | None, Truncation | None]:
    """(example with input_ids/labels, what cutoff_len cut or None); the example is None when no trained token
    survives cutoff_len."""
    pieces = template.render(example["messages"], example.get("system"), example.get("tools"))
    turns = _pair_turns(pieces, tokenizer)
    last_answer = max((k for k, (_, target) in enumerate(turns) if target), default=-1)
    input_ids: list[int] = []
    labels: list[int] = []
    truncated = False
    kept_source = kept_target = 0
    for k, (source, target) in enumerate(turns):
        room = cutoff_len - len(input_ids)
        if len(source) + len(target) > room:
            # Cut the prompt and its answer together so the answer keeps a fair share of what is left.
            truncated = True
            keep_target = min(len(target), max(room // 2, room - len(source)))
            source, target = source[: room - keep_target], target[:keep_target]
        trained = not mask_history or k == last_answer
        input_ids += source + target
        labels += source if train_on_prompt else [IGNORE] * len(source)
        labels += target if (trained or train_on_prompt) else [IGNORE] * len(target)
        kept_source, kept_target = kept_source + len(source), kept_target + len(target)
        if truncated:
            break
    cut = None
    if truncated:
        cut = Truncation(sum(len(s) for s, _ in turns) - kept_source, sum(len(t) for _, t in turns) - kept_target)
    if all(label == IGNORE for label in labels):
        return None, cut
    return {"input_ids": input_ids, "labels": labels}, cut


def _pair_turns(pieces: list[Piece], tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """Token ids grouped as (prompt side, answer that follows it) pairs."""
    turns: list[tuple[list[int], list[int]]] = []
    for piece in pieces:
        ids = encode_text(tokenizer, piece.text)
        if not piece.trainable:
            turns.append((ids, []))
        elif turns and not turns[-1][1]:
            turns[-1] = (turns[-1][0], ids)
        else:
            turns.append(([], ids))
    return turns


def encode_classification(template: Template, tokenizer: Any, prompt_template: str, text_ids: list[int],
                          target_ids: list[int], max_prompt_len: int, train_on_prompt: bool) -> dict:
    prompt = encode_classification_prompt(template, tokenizer, prompt_template, "", max_prompt_len, text_ids)
    labels = (prompt if train_on_prompt else [IGNORE] * len(prompt)) + target_ids
    return {"input_ids": prompt + target_ids, "labels": labels}
