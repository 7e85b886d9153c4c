"""BLEU-4 / ROUGE give the numbers LLaMA-Factory's own metric code gives on the same predictions.

tests/golden/textmetrics.json was made by LLaMA-Factory's ComputeSimilarity (tools/make_template_golden.py):
Chinese segmented by jieba, English, mixed text, an empty prediction, identical texts.
"""

import json
from pathlib import Path

import pytest

pytest.importorskip("jieba", reason="the metrics extra (jieba, rouge-chinese, nltk) is not installed")
pytest.importorskip("rouge_chinese", reason="the metrics extra is not installed")
pytest.importorskip("nltk", reason="the metrics extra is not installed")

from steadytune.eval.textmetrics import example_scores, generation_metrics  # noqa: E402

GOLDEN = json.loads((Path(__file__).parent / "golden" / "textmetrics.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("example", GOLDEN["examples"], ids=lambda e: e["predict"][:12] or "empty")
def test_each_example_scores_as_llamafactory(example):
    assert example_scores(example["predict"], example["label"]) == {
        k: example[k] for k in ("bleu-4", "rouge-1", "rouge-2", "rouge-l")}


def test_mean_over_examples_as_llamafactory():
    preds = [e["predict"] for e in GOLDEN["examples"]]
    labels = [e["label"] for e in GOLDEN["examples"]]
    ours = generation_metrics(preds, labels)
    assert ours == pytest.approx(GOLDEN["mean"], abs=1e-9)


def test_chinese_is_segmented_into_words_for_rouge():
    # jieba keeps 北京 / 上海 as words: ROUGE-1 counts 我, 爱 (2 of 3 words match) where characters would give 2 of 4
    assert example_scores("我爱北京", "我爱上海")["rouge-1"] == pytest.approx(66.6667)


def test_lengths_must_match():
    with pytest.raises(ValueError):
        generation_metrics(["a"], [])
    assert generation_metrics([], []) == {"bleu-4": 0.0, "rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0}
