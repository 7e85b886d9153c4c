"""BLEU-4 / ROUGE on small cases worked out by hand."""

import math

import pytest

from steadytune.textmetrics import generation_metrics, rouge_l, rouge_n, sentence_bleu4, tokenize


def test_tokenize_is_chinese_aware():
    assert tokenize("GPU训练很快!") == ["GPU", "训", "练", "很", "快", "!"]
    assert tokenize("  Hello, world 42 ") == ["Hello", ",", "world", "42"]
    assert tokenize("我爱abc北京") == ["我", "爱", "abc", "北", "京"]


def test_identical_texts_score_100():
    m = generation_metrics(["今天天气很好，我们去公园吧。"], ["今天天气很好，我们去公园吧。"])
    assert m == {"bleu-4": 100.0, "rouge-1": 100.0, "rouge-2": 100.0, "rouge-l": 100.0}


def test_chinese_by_hand():
    hyp, ref = tokenize("我爱北京"), tokenize("我爱上海")
    # unigrams 2/4; bigrams {我爱} 1/3; trigrams 0/2 -> 1/(2*2); 4-grams 0/1 -> 1/(4*1); brevity 1
    expected = (0.5 * (1 / 3) * (1 / 4) * (1 / 4)) ** 0.25
    assert sentence_bleu4(hyp, ref) == pytest.approx(expected)
    assert rouge_n(hyp, ref, 1) == pytest.approx(0.5)
    assert rouge_n(hyp, ref, 2) == pytest.approx(1 / 3)      # P = R = 1/3
    assert rouge_l(hyp, ref) == pytest.approx(0.5)           # LCS 我爱 = 2 of 4
    m = generation_metrics(["我爱北京"], ["我爱上海"])
    assert m["bleu-4"] == pytest.approx(100 * expected, abs=1e-3) and m["rouge-2"] == pytest.approx(33.3333, abs=1e-3)


def test_brevity_penalty_and_lcs_order():
    hyp, ref = tokenize("the cat sat"), tokenize("the cat sat on the mat")
    # all n-grams of the hypothesis match: p1 = p2 = p3 = 1; no 4-gram -> 1/(2*1); BP = exp(1 - 6/3)
    assert sentence_bleu4(hyp, ref) == pytest.approx(math.exp(1 - 2) * (0.5 ** 0.25))
    # ROUGE-L: LCS of "a b c d" and "a c b d" is 3 (a b d / a c d)
    assert rouge_l(list("abcd"), list("acbd")) == pytest.approx(0.75)
    assert rouge_n(hyp, ref, 1) == pytest.approx(2 * 1 * 0.5 / 1.5)  # P 3/3, R 3/6


def test_empty_and_disjoint():
    assert sentence_bleu4([], ["a"]) == 0.0 and rouge_l([], ["a"]) == 0.0
    assert generation_metrics(["好"], ["坏"]) == {"bleu-4": 0.0, "rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}
    # averaged over examples: one perfect, one disjoint -> 50
    assert generation_metrics(["好", "好"], ["好", "坏"])["rouge-1"] == pytest.approx(50.0)
    with pytest.raises(ValueError):
        generation_metrics(["a"], [])
