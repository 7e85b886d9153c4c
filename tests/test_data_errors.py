"""Every bad data input gives a DataError / ConfigError naming the file, line, row or key."""

from __future__ import annotations

import json
import re

import pytest
from sample_data import ALPACA, IMAGES, SHAREGPT_TOOLS, sample_dir

from steadytune.config import ConfigError, load_config
from steadytune.data.prepare import prepare_datasets
from steadytune.errors import DataError, UserError
from steadytune.model.tiny import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def prepare(tok, **keys):
    return prepare_datasets(load_config(None, keys), tok)


def expect(error, tok, pattern, **keys):
    with pytest.raises(error) as info:
        prepare(tok, **keys)
    assert re.search(pattern, str(info.value)), str(info.value)
    return str(info.value)


def test_unknown_dataset_name_lists_the_registry_file_and_close_names(tok):
    msg = expect(ConfigError, tok, r"'alpaca_sampel' is not in .*dataset_info\.json", dataset="alpaca_sampel",
                 dataset_dir=str(sample_dir()))
    assert f"close names: {ALPACA}" in msg


def test_missing_file_of_a_registry_entry(tok, tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "gone.json"}}))
    expect(DataError, tok, r"gone\.json: dataset file not found", dataset="mine", dataset_dir=str(tmp_path))


def test_missing_direct_path(tok, tmp_path):
    expect(DataError, tok, r"nothere\.jsonl: dataset file not found", dataset=str(tmp_path / "nothere.jsonl"))


def test_empty_file(tok, tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    expect(DataError, tok, r"empty\.jsonl: file is empty", dataset=str(tmp_path / "empty.jsonl"))


def test_empty_after_filtering(tok, tmp_path):
    path = tmp_path / "blank.json"
    path.write_text(json.dumps([{"instruction": "q", "input": "", "output": None}] * 3))
    expect(DataError, tok, r"train data \(.*blank\.json\) is empty after tokenisation: train: no output .*\(3\)", dataset=str(path))


def test_non_utf8_file_names_the_byte_offset(tok, tmp_path):
    path = tmp_path / "latin.jsonl"
    raw = b'{"text": "ok", "label": "neg"}\n{"text": "caf\xe9", "label": "pos"}\n'
    path.write_bytes(raw)
    expect(DataError, tok, rf"latin\.jsonl: not UTF-8 text \(byte offset {raw.index(0xE9)}, line 2\)", dataset=str(path))


def test_malformed_jsonl_line(tok, tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"instruction": "a", "output": "b"}\n\n{"instruction": "c", "output": }\n')
    expect(DataError, tok, r"broken\.jsonl line 3: malformed JSON", dataset=str(path))


def test_json_array_syntax_error_names_line_and_column(tok, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"instruction": "a", "output": "b"},\n  {"instruction": "c" "output": "d"}\n]\n')
    expect(DataError, tok, r"broken\.json: invalid JSON at line 3, column 23", dataset=str(path))


def test_missing_column_names_it_and_the_columns_found(tok, tmp_path):
    (tmp_path / "d.json").write_text(json.dumps([{"question": "a", "output": "b"}]))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"d": {"file_name": "d.json"}}))
    expect(DataError, tok, r"d\.json row 0: missing column 'instruction' .*columns found: question, output",
           dataset="d", dataset_dir=str(tmp_path))


def test_sharegpt_wrong_role_order_names_the_row(tok, tmp_path):
    rows = json.loads((sample_dir() / f"{SHAREGPT_TOOLS}.json").read_text(encoding="utf-8"))[:3]
    rows[2]["conversations"] = [rows[2]["conversations"][1], rows[2]["conversations"][0]]  # assistant turn first
    (tmp_path / "g.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"g": {
        "file_name": "g.json", "formatting": "sharegpt", "columns": {"messages": "conversations", "tools": "tools"}}}))
    expect(DataError, tok, r"g\.json row 2: turn 0 is '(gpt|function_call)' but a human/observation turn was expected",
           dataset="g", dataset_dir=str(tmp_path))


def test_label_not_in_label_names(tok, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "label": "pos"}\n{"text": "meh", "label": "neutral"}\n')
    expect(DataError, tok, r"c\.jsonl line 2: label 'neutral' is not in label_names \['neg', 'pos'\]",
           dataset=str(path), label_names=["neg", "pos"], prompt_template="{text}")


def test_classification_without_label_names(tok, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "label": "pos"}\n')
    expect(ConfigError, tok, r"label_names: dataset .*c\.jsonl is a classification dataset", dataset=str(path))


def test_prompt_template_without_text(tok, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "label": "pos"}\n')
    expect(ConfigError, tok, r"prompt_template must contain \{text\}", dataset=str(path), label_names=["neg", "pos"],
           prompt_template="Sentiment:")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"c": {
        "file_name": "c.jsonl", "formatting": "classification", "label_names": ["neg", "pos"], "prompt_template": "no slot"}}))
    expect(ConfigError, tok, r"prompt_template of dataset c must contain \{text\}", dataset="c", dataset_dir=str(tmp_path))


def test_cutoff_len_shorter_than_prompt_plus_target(tok, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "label": "pos"}\n')
    keys = dict(dataset=str(path), label_names=["neg", "pos"], prompt_template="Review: {text}\nSentiment:",
                template="gemma")
    msg = expect(ConfigError, tok, r"cutoff_len: 8 is too short: .* must be at least (\d+)", cutoff_len=8, **keys)
    needed = int(re.search(r"at least (\d+)", msg).group(1))
    assert prepare(tok, cutoff_len=needed, **keys).train[0]["input_ids"]   # exactly enough works
    expect(ConfigError, tok, r"cutoff_len", cutoff_len=needed - 1, **keys)


def test_hub_entry_without_datasets_package_or_network(tok, tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"remote": {"hf_hub_url": "someone/nothing-here"}}))
    expect(DataError, tok, r"dataset remote: (someone/nothing-here is on the Hugging Face hub and the `datasets` "
                           r"package is not installed|cannot load someone/nothing-here from the hub)",
           dataset="remote", dataset_dir=str(tmp_path))


def test_image_rows_without_a_vision_model_fail_loudly(tok):
    expect(DataError, tok, rf"{IMAGES}\.json row 0: the row has images or videos, and the model has no image processor",
           dataset=IMAGES, dataset_dir=str(sample_dir()))


def test_unsupported_registry_features_fail_loudly(tok, tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"speech": {"file_name": "s.json", "formatting": "sharegpt",
                                                                       "columns": {"audios": "audios"}}}))
    expect(DataError, tok, r"speech: not supported: audios columns \(audio", dataset="speech", dataset_dir=str(tmp_path))


def test_val_size_that_leaves_nothing(tok, tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"instruction": "q", "input": "", "output": "a"}] * 4))
    expect(ConfigError, tok, r"val_size: 4.0 holds out 4 of 4 examples", dataset=str(path), val_size=4)


def test_unknown_template(tok, tmp_path):
    expect(ConfigError, tok, r"template: unknown template 'qwen4' \(did you mean", dataset="x", template="qwen4")



def test_invalid_dataset_info_json(tok, tmp_path):
    text = '{"a": {"file_name": "a.json",}}'
    (tmp_path / "dataset_info.json").write_text(text)
    column = text.index(",}") + 2   # 1-based column of the "}" after the trailing comma
    expect(DataError, tok, rf"dataset_info\.json: invalid JSON at line 1, column {column}", dataset="a",
           dataset_dir=str(tmp_path))


def test_unknown_sharegpt_role_names_row_and_turn(tok, tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "yo"}]}]))
    expect(DataError, tok, r"chat\.json row 0: turn 1 has unknown role 'bot'", dataset=str(path))


def test_conversation_ending_with_a_user_turn(tok, tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    expect(DataError, tok, r"chat\.jsonl line 1: the conversation must end with an answer \(assistant/function\) turn",
           dataset=str(path))


def test_csv_row_with_more_fields_than_the_header(tok, tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("text,label\nfine,pos\nbad,neg,extra\n")
    expect(DataError, tok, r"c\.csv line 3: more fields than the header", dataset=str(path), label_names=["neg", "pos"])


def test_auto_template_that_cannot_render_is_refused(tok, tmp_path):
    from steadytune.data.templates import get_template
    tok = build_tokenizer()
    tok.chat_template = "{{ raise_exception('System role not supported') }}"
    with pytest.raises(ConfigError, match="chat_template failed to render .*set template: to a named one"):
        get_template("auto", tok)


# ---------------------------------------------------------------------------------------------------------
# Issue 25: rows left out are said on the console; a huge row or deep JSON is one line naming file and line
# ---------------------------------------------------------------------------------------------------------

def test_a_row_dropped_for_a_non_text_output_is_said_on_the_console(tok, tmp_path, caplog):
    path = tmp_path / "mixed.jsonl"
    rows = [{"instruction": "q", "input": "", "output": "a"}] * 3 + [{"instruction": "q", "output": 5},
                                                                     {"instruction": "q", "output": ["a", "b"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING"):
        data = prepare(tok, dataset=str(path))
    assert len(data.train) == 3
    said = [r.getMessage() for r in caplog.records]
    line = next(m for m in said if "output is not text" in m)
    assert "2 training rows left out" in line and f"{path} line 4" in line and "\n" not in line
    assert any("output is not text" in w for w in data.stats["warnings"])


MAX_ROW = 4 << 20


@pytest.mark.timeout(60)
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".txt"])
def test_a_row_larger_than_the_limit_is_one_line_naming_file_and_line(tok, tmp_path, suffix):
    """A 50 MB one-line row peaked at 14.8 GB while tokenised; now it is refused before tokenisation."""
    big = "word " * (MAX_ROW // 5 + 1000)
    path = tmp_path / f"big{suffix}"
    small = {"instruction": "q", "input": "", "output": "a"}
    if suffix == ".jsonl":
        path.write_text(json.dumps(small) + "\n" + json.dumps({**small, "input": big}) + "\n")
        where = r"big\.jsonl line 2"
    elif suffix == ".json":
        path.write_text(json.dumps([small, {**small, "input": big}]))
        where = r"big\.json row 1"
    elif suffix == ".csv":
        path.write_text(f"instruction,input,output\nq,,a\nq,{big},a\n")
        where = r"big\.csv line 3"
    else:
        path.write_text("short\n" + big + "\n")
        where = r"big\.txt line 2"
    msg = expect(DataError, tok, where + r": a row of 4\.2 MB is larger than the 4 MiB a row may hold", dataset=str(path),
                 stage="pt" if suffix == ".txt" else "sft")
    assert len(msg) < 300


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_deeply_nested_json_is_one_line(tok, tmp_path, suffix):
    path = tmp_path / f"deep{suffix}"
    deep = '{"instruction": "q", "output": "a", "history": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(deep + "\n" if suffix == ".jsonl" else "[" + deep + "]")
    expect(DataError, tok, rf"deep\{suffix}( line 1)?: .*nested too deeply", dataset=str(path))


def test_errors_quote_a_cut_value(tok, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"text": "fine", "label": "x" * 100_000}) + "\n")
    msg = expect(DataError, tok, r"labels\.jsonl line 1: label 'x+\.\.\.", dataset=str(path), label_names=["neg", "pos"])
    assert len(msg) < 400


@pytest.mark.parametrize("row, pattern, keys", [
    ({"instruction": "\ud800", "output": "a"}, r"line 1: text holds \\ud800, half of a UTF-16 surrogate pair", {}),
    ({"conversations": [{"from": ["human"], "value": "hi"}, {"from": "gpt", "value": "yo"}]},
     r"line 1: turn 0 has role \['human'\], which is not text", {}),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [1]}]},
     r"line 1: turn 1: tool_calls must be a list of", {}),
    ({"instruction": "q", "chosen": {"role": "assistant", "content": "a"}, "rejected": "b"},
     r"line 1: chosen must be text in an alpaca row", {"stage": "dpo"}),
    ({"a\nb": 1}, r"cannot tell the format from the columns \('a\\nb'\)", {}),
])
def test_odd_rows_found_by_the_fuzzer_are_one_line(tok, tmp_path, row, pattern, keys):
    """Found by tests/test_fuzz_data.py: each was a TypeError or KeyError traceback, or a message of two lines."""
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps(row) + "\n")
    kind = None
    if keys.get("stage") == "dpo":
        from steadytune.data.preference import PAIRS
        kind = PAIRS
    with pytest.raises(UserError) as info:
        prepare_datasets(load_config(None, {"dataset": str(path), **keys}), tok, kind)
    assert re.search(pattern, str(info.value)) and "\n" not in str(info.value), str(info.value)


def test_kto_rows_named_by_path_without_a_tag_are_one_line(tok, tmp_path):
    """Found by tests/test_fuzz_data.py: a file named by path has no `columns`, and the check read None."""
    from steadytune.data.preference import FEEDBACK
    path = tmp_path / "kto.jsonl"
    path.write_text(json.dumps({"instruction": "q", "output": "a"}) + "\n")
    with pytest.raises(ConfigError, match="has no kto_tag column"):
        prepare_datasets(load_config(None, {"dataset": str(path), "stage": "kto"}), tok, FEEDBACK)


@pytest.mark.timeout(60)
def test_a_long_default_system_is_tokenised_once(tok, tmp_path):
    """Issue 25, case 5: a 10 MB default_system is refused by the config (test_config.py); one at the 100,000
    characters it allows took 75 ms a row to tokenise (15 s for 200 rows here): now once for all rows."""
    import time
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"instruction": f"q{i}", "input": "", "output": "a"} for i in range(200)]))
    start = time.monotonic()
    data = prepare(tok, dataset=str(path), template="qwen", default_system="word " * 20_000, cutoff_len=1024)
    assert len(data.train) == 200 and time.monotonic() - start < 5
    alone = prepare(tok, dataset=str(path), template="qwen", default_system="word " * 20_000, cutoff_len=1024,
                    max_samples=1)
    assert alone.train[0]["input_ids"] in [e["input_ids"] for e in data.train]


def test_a_token_budget_below_the_longest_example_is_refused_naming_both(tok):
    """max_tokens_per_batch: 1 was accepted though every example is longer: each went into a micro-batch of its own,
    past the budget, without a word (issue 67)."""
    from steadytune.data.prepare import check_data_fits_keys

    cfg = load_config(None, {"dataset": ALPACA, "dataset_dir": str(sample_dir()), "max_tokens_per_batch": 1})
    data = prepare_datasets(cfg, tok)
    longest = max(len(x["input_ids"]) for x in data.train)
    with pytest.raises(UserError, match=rf"max_tokens_per_batch: 1 is below the longest training example \({longest} "
                                        rf"tokens after cutoff_len 2048\).*at least {longest}"):
        check_data_fits_keys(cfg, data)
    cfg.train.max_tokens_per_batch = longest
    check_data_fits_keys(cfg, data)
