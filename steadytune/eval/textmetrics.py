"""BLEU-4 and ROUGE-1/2/L for generation tasks (`do_predict` + `predict_with_generate`), computed the way
LLaMA-Factory computes them (`train/sft/metric.py`, ComputeSimilarity), with the same libraries, so the same
predictions give the same numbers in both tools (tests/test_eval_textmetrics.py checks against values its code
produced):

- ROUGE: both texts segmented into words by jieba, scored by rouge-chinese (F1 of ROUGE-1, -2 and -L);
  a text with no word at all scores 0;
- BLEU-4: nltk's sentence BLEU over *characters* (spaces included), smoothed with Chen & Cherry's method 3;
- every score x 100 rounded to 4 decimals per example, then averaged over examples.

The libraries are the `metrics` extra (`pip install 'steadytune[metrics]'`).
"""

from __future__ import annotations

import logging
from typing import Sequence

from steadytune.errors import UserError

KEYS = ("bleu-4", "rouge-1", "rouge-2", "rouge-l")


def _libraries():
    try:
        import jieba
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
        from rouge_chinese import Rouge
    except ImportError as e:
        raise UserError(f"BLEU/ROUGE need jieba, rouge-chinese and nltk ({e.name} is missing): "
                        "pip install 'steadytune[metrics]'") from None
    jieba.setLogLevel(logging.WARNING)  # jieba announces its dictionary on stderr otherwise
    return jieba, Rouge, sentence_bleu, SmoothingFunction().method3


def example_scores(prediction: str, reference: str) -> dict[str, float]:
    """The four scores of one prediction against its reference, x 100, rounded as LLaMA-Factory rounds them."""
    jieba, Rouge, sentence_bleu, smoothing = _libraries()
    hypothesis, words = " ".join(jieba.cut(prediction)), " ".join(jieba.cut(reference))
    if not hypothesis.split() or not words.split():
        rouge = {"rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}
    else:
        rouge = {k: v["f"] for k, v in Rouge().get_scores(hypothesis, words)[0].items()}
    bleu = sentence_bleu([list(reference)], list(prediction), smoothing_function=smoothing)
    return {key: round(value * 100, 4) for key, value in {"bleu-4": bleu, **rouge}.items()}


def generation_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean of the per-example scores under LLaMA-Factory's key names (bleu-4, rouge-1, rouge-2, rouge-l)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    if not predictions:
        return {key: 0.0 for key in KEYS}
    totals = dict.fromkeys(KEYS, 0.0)
    for prediction, reference in zip(predictions, references):
        for key, value in example_scores(prediction, reference).items():
            totals[key] += value
    return {key: totals[key] / len(predictions) for key in KEYS}
