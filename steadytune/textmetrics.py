"""BLEU-4 and ROUGE-1/2/L for generation tasks (`do_predict` + `predict_with_generate`), as LLaMA-Factory
users read them: sentence-level scores averaged over examples, times 100.

Tokenisation is Chinese-aware without a segmenter: every CJK character is a token (the usual choice for
Chinese evaluation, and independent of a word-segmentation dictionary), runs of letters / digits are word
tokens, other non-space characters are single tokens. LLaMA-Factory segments with jieba for ROUGE, so its
ROUGE values on Chinese differ from ours; BLEU is computed on characters in both.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

# CJK ideographs (incl. extension A and compatibility), kana and hangul: one token per character.
_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]"
                    r"|[^\W_]+"
                    r"|[^\s]", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def tokenize(text: str) -> list[str]:
    """'GPU训练很快!' -> ['GPU', '训', '练', '很', '快', '!']"""
    tokens = []
    for match in _TOKEN.finditer(text):
        piece = match.group()
        # [^\W_]+ also matches runs of CJK characters (they are word characters); split those apart.
        tokens.extend(_split_cjk(piece) if _CJK.search(piece) else [piece])
    return tokens


def _split_cjk(piece: str) -> list[str]:
    out, word = [], ""
    for ch in piece:
        if _CJK.match(ch):
            if word:
                out.append(word)
                word = ""
            out.append(ch)
        else:
            word += ch
    return out + ([word] if word else [])


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu4(hypothesis: Sequence[str], reference: Sequence[str]) -> float:
    """BLEU-4 of one hypothesis against one reference, in [0, 1].

    Zero n-gram matches are smoothed as in NIST (Chen & Cherry 2014, method 3; LLaMA-Factory's choice via
    nltk): the k-th order with no match counts as 1 / (2^k * number of hypothesis n-grams).
    """
    if not hypothesis or not reference:
        return 0.0
    log_precision = 0.0
    halvings = 1
    for n in range(1, 5):
        hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
        matches = sum(min(count, ref[gram]) for gram, count in hyp.items())
        total = max(1, sum(hyp.values()))
        if matches == 0:
            if n == 1:
                return 0.0  # nothing in common at all
            precision = 1.0 / (2 ** halvings * total)
            halvings += 1
        else:
            precision = matches / total
        log_precision += math.log(precision) / 4
    brevity = 1.0 if len(hypothesis) > len(reference) else math.exp(1 - len(reference) / len(hypothesis))
    return brevity * math.exp(log_precision)


def _f1(matches: int, hyp_total: int, ref_total: int) -> float:
    if matches == 0:
        return 0.0
    precision, recall = matches / hyp_total, matches / ref_total
    return 2 * precision * recall / (precision + recall)


def rouge_n(hypothesis: Sequence[str], reference: Sequence[str], n: int) -> float:
    """ROUGE-N F1 in [0, 1]."""
    hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
    matches = sum(min(count, ref[gram]) for gram, count in hyp.items())
    return _f1(matches, sum(hyp.values()), sum(ref.values()))


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(hypothesis: Sequence[str], reference: Sequence[str]) -> float:
    """ROUGE-L F1 (longest common subsequence) in [0, 1]."""
    if not hypothesis or not reference:
        return 0.0
    return _f1(_lcs_length(hypothesis, reference), len(hypothesis), len(reference))


def generation_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean sentence-level scores x 100 under LLaMA-Factory's key names (bleu-4, rouge-1, rouge-2, rouge-l)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    if not predictions:
        return {"bleu-4": 0.0, "rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}
    sums = Counter()
    for prediction, reference in zip(predictions, references):
        hyp, ref = tokenize(prediction), tokenize(reference)
        sums["bleu-4"] += sentence_bleu4(hyp, ref)
        sums["rouge-1"] += rouge_n(hyp, ref, 1)
        sums["rouge-2"] += rouge_n(hyp, ref, 2)
        sums["rouge-l"] += rouge_l(hyp, ref)
    return {key: round(100 * sums[key] / len(predictions), 4) for key in ("bleu-4", "rouge-1", "rouge-2", "rouge-l")}
