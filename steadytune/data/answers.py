"""Conversation rows whose answers are label words, evaluated as classification: with `label_names` set, an sft
dataset whose every answer is one of them (a vision-language task such as "What colour is the square?" -> red / blue,
in LLaMA-Factory's sharegpt format with its images) is scored as a classification set: each example's prompt (the
tokens before its answer: its image tokens included) against every label's target tokens (label word + end of turn),
the gold label the example's own answer. The prompt is the training prompt exactly, so the scores are those of the
answer the model was trained to give.
"""

from __future__ import annotations

from typing import Any, Sequence

from steadytune.data.encode import IGNORE_INDEX, encode_label_targets
from steadytune.errors import DataError


def answer_text(example: dict, tokenizer: Any) -> str:
    """An example's trained answer as text (its labelled tokens, special tokens dropped)."""
    return tokenizer.decode([t for t in example["labels"] if t != IGNORE_INDEX], skip_special_tokens=True).strip()


def answers_as_labels(data, label_names: Sequence[str], tokenizer: Any, where: str = "eval_dataset") -> bool:
    """Turn prepared conversation data into classification data in place when `label_names` is set and the data has
    no labels of its own: data.label_names / label_targets, and each example's label_id from its answer. -> whether
    it did. An answer that is not one of label_names is an error listing both sets."""
    if not label_names or data.label_names or not data.eval:
        return False
    names = [str(n) for n in label_names]
    answers = {answer_text(e, tokenizer) for e in data.eval}
    if not answers <= set(names):
        raise DataError(f"{where}: with label_names {names}, every answer must be one of them (scored as labels); "
                        f"its rows' answers are {sorted(answers)}. Fix label_names, or leave it unset to evaluate "
                        "the answers by generation (BLEU/ROUGE)")
    for split in (data.train, data.eval):
        for example in split or []:
            text = answer_text(example, tokenizer)
            if text in names:
                example["label_id"] = names.index(text)
    data.label_names = names
    data.label_targets = encode_label_targets(data.template, tokenizer, names)
    return True
