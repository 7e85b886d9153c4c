"""Hypothesis against the dataset readers (issue 25): any file content, in the shapes of alpaca, sharegpt, openai,
classification and preference (pairs, KTO) rows or none at all, as .json / .jsonl / .csv / .txt, either gives
examples, or is a DataError / UserError on one line naming the file (or the dataset, which given by path is the
file), in bounded time; never another exception. Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import csv
import io
import json
import tempfile
import time
from pathlib import Path

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

from steadytune.config import load_config
from steadytune.data.preference import FEEDBACK, PAIRS
from steadytune.data.prepare import prepare_datasets
from steadytune.errors import UserError
from steadytune.model.tiny import build_tokenizer

# CPU seconds of this process, not wall time: a loaded CI machine stretches the wall clock, not the work
SECONDS = 5
LABELS = ["neg", "pos"]
# Text with what breaks tokenizers and templates: lone surrogates, NUL, control tokens, bidi controls, CJK, emoji.
ODD = ["\ud800", "\x00", "<|im_end|>", "<|im_start|>user", "<eos>", "\u202e", "消极", "🙂", "\r\n", " ", "", "{text}",
       "null", "0"]
texts = st.one_of(st.text(max_size=30), st.sampled_from(ODD), st.lists(st.sampled_from(ODD), max_size=4).map("".join))
json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), texts),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                           max_leaves=8)
cell = st.one_of(texts, texts, texts, json_values)   # mostly text, sometimes anything

alpaca = st.fixed_dictionaries(
    {"instruction": cell, "output": cell},
    optional={"input": cell, "system": cell, "history": st.one_of(st.lists(st.lists(cell, max_size=3), max_size=2),
                                                                  json_values)})
ROLES = ["human", "gpt", "system", "observation", "function_call", "bot", "user", "assistant", "tool", "function"]
turn_of = {
    "sharegpt": lambda: st.fixed_dictionaries({"from": st.one_of(st.sampled_from(ROLES), json_values), "value": cell}),
    "openai": lambda: st.fixed_dictionaries({"role": st.one_of(st.sampled_from(ROLES), json_values), "content": cell},
                                            optional={"tool_calls": json_values}),
}
sharegpt = st.fixed_dictionaries({"conversations": st.one_of(st.lists(turn_of["sharegpt"](), max_size=5), json_values)},
                                 optional={"system": cell, "tools": cell})
openai = st.fixed_dictionaries({"messages": st.one_of(st.lists(turn_of["openai"](), max_size=5), json_values)},
                               optional={"tools": cell})
classification = st.fixed_dictionaries({"text": cell, "label": st.one_of(st.sampled_from(LABELS + [0, 1, 2]), cell)})
answer = st.one_of(cell, turn_of["sharegpt"](), turn_of["openai"]())
pair = st.one_of(alpaca, sharegpt, openai).flatmap(
    lambda row: st.fixed_dictionaries({"chosen": answer, "rejected": answer}).map(lambda extra: {**row, **extra}))
feedback = st.one_of(alpaca, sharegpt, openai).flatmap(
    lambda row: st.one_of(st.booleans(), json_values).map(lambda tag: {**row, "kto_tag": tag}))
anything = st.dictionaries(texts, json_values, max_size=4)


def as_file(rows: list, suffix: str, junk: list[str]) -> str:
    """Rows as file text; `junk` lines are mixed into .jsonl files (torn writes, comments, blank lines)."""
    if suffix == ".json":
        return json.dumps(rows)
    if suffix == ".csv":
        out = io.StringIO()
        columns = sorted({str(k) for r in rows if isinstance(r, dict) for k in r}) or ["text"]
        writer = csv.writer(out)
        writer.writerow(columns)
        for r in rows:
            writer.writerow([json.dumps(r.get(c)) if isinstance(r, dict) and isinstance(r.get(c), (dict, list))
                             else (r.get(c, "") if isinstance(r, dict) else r) for c in columns])
        return out.getvalue()
    lines = [json.dumps(r) for r in rows] + junk
    return "\n".join(lines)


files = st.tuples(st.sampled_from([".jsonl", ".json", ".csv", ".txt"]),
                  st.lists(st.sampled_from(["", "{", "[1]", "null", "{\"a\": 1", "\ufeff{}", "#", "[[[[", "\x00"]),
                           max_size=2))
TOKENIZER = None


@pytest.fixture(scope="module", autouse=True)
def tokenizer():
    global TOKENIZER
    TOKENIZER = build_tokenizer()


def prepares_or_says_why(content: str, suffix: str, keys: dict, kind=None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"data{suffix}"
        path.write_bytes(content.encode("utf-8", "surrogatepass"))
        start = time.process_time()
        try:
            data = prepare_datasets(load_config(None, {"dataset": str(path), "cutoff_len": 48, **keys}), TOKENIZER,
                                    kind)
        except UserError as e:
            message = str(e)
            assert "\n" not in message.strip() and len(message) < 1500, message[:2000]
            assert path.name in message, message[:500]
        else:
            assert data.train, "no training example and no error"
        assert time.process_time() - start < SECONDS


@fuzz(80)
@given(st.lists(st.one_of(alpaca, sharegpt, openai, anything), min_size=1, max_size=4), files,
       st.sampled_from(["qwen", "empty"]))
def test_conversations_give_examples_or_one_line(rows, file, template):
    suffix, junk = file
    prepares_or_says_why(as_file(rows, suffix, junk), suffix, {"template": template})


@fuzz(60)
@given(st.lists(st.one_of(classification, anything), min_size=1, max_size=4), files)
def test_classification_rows_give_examples_or_one_line(rows, file):
    suffix, junk = file
    prepares_or_says_why(as_file(rows, suffix, junk), suffix,
                         {"template": "empty", "label_names": LABELS, "prompt_template": "Text: {text}\nLabel: "})


@fuzz(60)
@given(st.lists(pair, min_size=1, max_size=3), files)
def test_preference_pairs_give_examples_or_one_line(rows, file):
    suffix, junk = file
    prepares_or_says_why(as_file(rows, suffix, junk), suffix, {"template": "qwen", "stage": "dpo"}, PAIRS)


@fuzz(60)
@given(st.lists(feedback, min_size=1, max_size=3), files)
def test_kto_rows_give_examples_or_one_line(rows, file):
    suffix, junk = file
    prepares_or_says_why(as_file(rows, suffix, junk), suffix, {"template": "qwen", "stage": "kto"}, FEEDBACK)


@fuzz(60)
@given(st.text(max_size=300), st.sampled_from([".jsonl", ".json", ".csv", ".txt"]), st.sampled_from(["sft", "pt"]))
def test_any_text_gives_examples_or_one_line(text, suffix, stage):
    prepares_or_says_why(text, suffix, {"template": "empty", "stage": stage})
