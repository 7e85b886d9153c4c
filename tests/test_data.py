"""Data pipeline: formats on the real LLaMA-Factory demo files, templates, loss masks, classification encoding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LF_FIXTURES, needs_shared
from sample_data import ALPACA, SHAREGPT_TOOLS, sample_dir

from steadytune.config import load_config
from steadytune.data.collators import PadCollator
from steadytune.data.encode import IGNORE_INDEX, encode_classification_prompt, encode_conversation, encode_label_targets
from steadytune.data.prepare import prepare_datasets
from steadytune.data.templates import get_template, missing_special_tokens
from steadytune.model.tiny import build_tokenizer

LF_DATA = LF_FIXTURES / "data"


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def cfg_for(**keys):
    keys.setdefault("dataset_dir", str(sample_dir()))
    return load_config(None, keys)


def trained_text(tok, example) -> str:
    return tok.decode([t for t in example["labels"] if t != IGNORE_INDEX])


def rows_of(folder: Path, file: str) -> list[dict]:
    return json.loads((folder / file).read_text(encoding="utf-8"))


# ---- formats on the project's sample files and on LLaMA-Factory's real demo files ---------------------------

ALPACA_SOURCES = [pytest.param(sample_dir, ALPACA, f"{ALPACA}.json", id="own-sample"),
                  *[pytest.param(lambda: LF_DATA, name, file, marks=needs_shared, id=name)
                    for name, file in (("alpaca_en_demo", "alpaca_en_demo.json"),
                                       ("alpaca_zh_demo", "alpaca_zh_demo.json"), ("identity", "identity.json"))]]


@pytest.mark.parametrize("folder,name,file", ALPACA_SOURCES)
def test_alpaca_files_train_only_on_the_output(tok, folder, name, file):
    data = prepare_datasets(cfg_for(dataset=name, dataset_dir=str(folder()), template="qwen", cutoff_len=4096,
                                    max_samples=20), tok)
    rows = rows_of(folder(), file)[:20]
    assert len(data.train) == 20 and data.eval is None and data.label_names is None and data.class_counts == {}
    for row, example in zip(rows, data.train):
        assert trained_text(tok, example) == row["output"] + "<|im_end|>\n"
        prompt = "\n".join(x for x in (row["instruction"], row["input"]) if x)
        assert tok.decode(example["input_ids"]).startswith(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
    assert data.stats["rows_read"] == {name: len(rows_of(folder(), file))}


@pytest.mark.parametrize("folder,name,file", [
    pytest.param(sample_dir, SHAREGPT_TOOLS, f"{SHAREGPT_TOOLS}.json", id="own-sample"),
    pytest.param(lambda: LF_DATA, "glaive_toolcall_zh_demo", "glaive_toolcall_zh_demo.json", marks=needs_shared,
                 id="glaive_toolcall_zh_demo")])
def test_sharegpt_toolcall_masks_everything_but_assistant_turns(tok, folder, name, file):
    data = prepare_datasets(cfg_for(dataset=name, dataset_dir=str(folder()), template="qwen", cutoff_len=100000,
                                    max_samples=10), tok)
    for row, example in zip(rows_of(folder(), file)[:10], data.train):
        expected = ""
        for turn in row["conversations"]:
            if turn["from"] == "gpt":
                expected += turn["value"] + "<|im_end|>\n"
            elif turn["from"] == "function_call":
                expected += "<tool_call>\n" + turn["value"] + "\n</tool_call><|im_end|>\n"
        assert trained_text(tok, example) == expected
        full = tok.decode(example["input_ids"])
        for turn in row["conversations"]:
            if turn["from"] == "observation":
                assert f"<tool_response>\n{turn['value']}\n</tool_response>" in full
        for tool in json.loads(row["tools"]):   # tools are described in the system prompt, in Qwen's tool format
            assert f'"name": "{tool["name"]}"' in full
        assert ("# Tools" in full) == bool(json.loads(row["tools"]))
        # tools "[]" still opens the system slot, empty, as in LLaMA-Factory
        assert full.startswith("<|im_start|>system\n")


def test_openai_format_with_tags(tok, tmp_path):
    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"},
                          {"role": "assistant", "content": "Goodbye"}]}]
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"chat": {"file_name": "chat.jsonl", "formatting": "openai",
                                                                     "columns": {"messages": "messages"}}}))
    data = prepare_datasets(load_config(None, dict(dataset="chat", dataset_dir=str(tmp_path), template="chatml")), tok)
    ex = data.train[0]
    # LLaMA-Factory's openai converter appends "detailed thinking off" to the system prompt of rows without tools.
    assert tok.decode(ex["input_ids"]) == ("<|im_start|>system\nBe brief.\ndetailed thinking off<|im_end|>\n"
                                           "<|im_start|>user\nHi<|im_end|>\n"
                                           "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                                           "<|im_start|>assistant\nGoodbye<|im_end|>\n")
    assert trained_text(tok, ex) == "Hello<|im_end|>\nGoodbye<|im_end|>\n"
    hist = prepare_datasets(load_config(None, dict(dataset="chat", dataset_dir=str(tmp_path), template="chatml",
                                                   mask_history=True)), tok)
    assert trained_text(tok, hist.train[0]) == "Goodbye<|im_end|>\n"


def test_alpaca_history_and_system(tok, tmp_path):
    row = {"instruction": "And 3+3?", "input": "", "output": "6", "system": "You do sums.",
           "history": [["1+1?", "2"], ["2+2?", "4"]]}
    path = tmp_path / "sums.json"
    path.write_text(json.dumps([row]))
    data = prepare_datasets(load_config(None, dict(dataset=str(path), template="llama3")), tok)
    ex = data.train[0]
    assert tok.decode(ex["input_ids"]) == (
        "<bos><|start_header_id|>system<|end_header_id|>\n\nYou do sums.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n1+1?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n2<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n6<|eot_id|>")
    assert trained_text(tok, ex) == "2<|eot_id|>4<|eot_id|>6<|eot_id|>"


# ---- masks ---------------------------------------------------------------------------------------------

def test_labels_are_ignored_exactly_on_prompt_tokens(tok):
    template = get_template("gemma", tok)
    example = {"messages": [{"role": "user", "content": "Give three tips."}, {"role": "assistant", "content": "Eat well."}]}
    encoded, truncated = encode_conversation(template, tok, example, cutoff_len=1000)
    prompt = tok("<bos><start_of_turn>user\nGive three tips.<end_of_turn>\n<start_of_turn>model\n",
                 add_special_tokens=False)["input_ids"]
    answer = tok("Eat well.<end_of_turn>\n", add_special_tokens=False)["input_ids"]
    assert not truncated
    assert encoded["input_ids"] == prompt + answer
    assert encoded["labels"] == [IGNORE_INDEX] * len(prompt) + answer
    on_prompt, _ = encode_conversation(template, tok, example, cutoff_len=1000, train_on_prompt=True)
    assert on_prompt["labels"] == on_prompt["input_ids"]


def test_cutoff_truncates_and_keeps_an_answer(tok):
    template = get_template("qwen", tok)
    example = {"messages": [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "ok " * 200}]}
    encoded, truncated = encode_conversation(template, tok, example, cutoff_len=64)
    assert truncated and len(encoded["input_ids"]) == 64
    trained = sum(1 for t in encoded["labels"] if t != IGNORE_INDEX)
    assert 0 < trained < 64 and encoded["labels"][0] == IGNORE_INDEX


# ---- templates -----------------------------------------------------------------------------------------

TURNS = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
EXPECTED_RENDER = {   # LLaMA-Factory's templates (their ids are checked in test_template_golden.py)
    "empty": "HiYo",
    "default": "System: S<eos>\nHuman: Hi<eos>\nAssistant:Yo<eos>\n",
    "chatml": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
    "qwen": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
    "qwen3": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
             "<think>\n\n</think>\n\nYo<|im_end|>\n",
    "qwen3_nothink": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
    "gemma": "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n",
    "gemma3": "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n",
    "llama3": "<bos><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
              "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_RENDER))
def test_template_renders_expected_text_with_single_special_tokens(tok, name):
    template = get_template(name, tok)
    system = None if name == "empty" else "S"
    pieces = template.render(TURNS, system)
    assert "".join(p.text for p in pieces) == EXPECTED_RENDER[name]
    assert [p.trainable for p in pieces] == [False, True]
    # Every special token of the template is one token id, not split into pieces.
    vocab = tok.get_vocab()
    missing = missing_special_tokens(template, tok)
    assert missing == (["<|eom_id|>"] if name == "llama3" else [])   # the tiny vocabulary lacks Llama 3's eom
    for special in template.special_tokens() + ([template.stop] if template.stop else []):
        if special not in missing:
            assert tok(special, add_special_tokens=False)["input_ids"] == [vocab[special]]


def test_auto_template_uses_the_tokenizers_chat_template(tok):
    tok = build_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    auto, chatml = get_template("auto", tok), get_template("chatml", tok)
    turns = TURNS + [{"role": "user", "content": "Again"}, {"role": "assistant", "content": "Yo yo"}]
    assert [p.text for p in auto.render(turns, "S")] == [p.text for p in chatml.render(turns, "S")]
    assert get_template("auto", build_tokenizer()).name == "empty"   # no chat template: plain text


# ---- classification ------------------------------------------------------------------------------------

def write_classification(tmp_path: Path, n_neg: int, n_pos: int, name: str = "reviews.jsonl") -> Path:
    rows = [{"text": f"review number {i} " + ("bad" if i < n_neg else "good"), "label": "neg" if i < n_neg else "pos"}
            for i in range(n_neg + n_pos)]
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return path


def test_classification_example_is_prompt_ids_plus_label_target(tok, tmp_path):
    path = write_classification(tmp_path, 6, 4)
    prompt_template = "Review: {text}\nSentiment:"
    cfg = load_config(None, dict(dataset=str(path), template="gemma", label_names=["neg", "pos"],
                                 prompt_template=prompt_template, cutoff_len=200))
    data = prepare_datasets(cfg, tok)
    targets = encode_label_targets(data.template, tok, ["neg", "pos"])
    assert data.label_targets == targets and data.prompt_template == prompt_template
    for ex in data.train:
        prompt = encode_classification_prompt(data.template, tok, prompt_template, ex["text"], data.max_prompt_len)
        assert ex["input_ids"] == prompt + targets[ex["label_id"]]
        assert ex["labels"] == [IGNORE_INDEX] * len(prompt) + targets[ex["label_id"]]
        assert tok.decode(targets[ex["label_id"]]) == ["neg", "pos"][ex["label_id"]] + "<end_of_turn>\n"
        assert tok.decode(prompt) == ("<bos><start_of_turn>user\nReview: " + ex["text"] +
                                      "\nSentiment:<end_of_turn>\n<start_of_turn>model\n")
    assert data.class_counts == {"train": {"neg": 6, "pos": 4}}


def test_chinese_labels_are_multi_token_and_truncation_spares_the_target(tok, tmp_path):
    rows = [{"text": "质量不错" * 80, "label": "积极"}, {"text": "太差了", "label": "消极"}]
    path = tmp_path / "zh.json"
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    cfg = load_config(None, dict(dataset=str(path), template="qwen3_nothink", label_names=["消极", "积极"],
                                 prompt_template="评论：{text}\n情感：", cutoff_len=96))
    data = prepare_datasets(cfg, tok)
    targets = data.label_targets
    assert all(len(t) > 2 for t in targets)          # the label word itself spans several tokens
    long_ex = data.train[0]
    assert len(long_ex["input_ids"]) <= 96 and data.stats["truncated"] == 1
    assert long_ex["input_ids"][-len(targets[1]):] == targets[1]
    assert tok.decode(long_ex["input_ids"]).endswith("<|im_start|>assistant\n积极<|im_end|>\n")


def test_stratified_val_split_keeps_class_ratio_and_is_deterministic(tok, tmp_path):
    path = write_classification(tmp_path, 70, 30)
    keys = dict(dataset=str(path), template="empty", label_names=["neg", "pos"], prompt_template="{text} =>",
                val_size=0.2, cutoff_len=64)
    a = prepare_datasets(load_config(None, dict(keys, seed=1)), tok)
    assert a.class_counts == {"train": {"neg": 56, "pos": 24}, "eval": {"neg": 14, "pos": 6}}
    assert a.stats["eval_texts_in_train"] == 0
    b = prepare_datasets(load_config(None, dict(keys, seed=1)), tok)
    assert [e["input_ids"] for e in a.train] == [e["input_ids"] for e in b.train]
    assert [e["text"] for e in a.eval] == [e["text"] for e in b.eval]
    c = prepare_datasets(load_config(None, dict(keys, seed=2)), tok)
    assert [e["text"] for e in a.eval] != [e["text"] for e in c.eval]
    counted = prepare_datasets(load_config(None, dict(keys, val_size=10)), tok)
    assert counted.class_counts["eval"] == {"neg": 7, "pos": 3}
    capped = prepare_datasets(load_config(None, dict(keys, max_eval_samples=10)), tok)
    assert capped.class_counts == {"train": {"neg": 56, "pos": 24}, "eval": {"neg": 7, "pos": 3}}


def test_max_samples_is_stratified_for_classification(tok, tmp_path):
    path = write_classification(tmp_path, 50, 50)   # sorted by label: a plain head would be all "neg"
    cfg = load_config(None, dict(dataset=str(path), template="empty", label_names=["neg", "pos"],
                                 prompt_template="{text}", max_samples=10))
    assert prepare_datasets(cfg, tok).class_counts["train"] == {"neg": 5, "pos": 5}


def test_csv_classification_with_remapped_columns_in_dataset_info(tok, tmp_path):
    (tmp_path / "r.csv").write_text("review,stars\nnice one,pos\nawful,neg\n", encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"r": {
        "file_name": "r.csv", "formatting": "classification", "columns": {"text": "review", "label": "stars"},
        "label_names": ["neg", "pos"], "prompt_template": "{text} ->"}}))
    data = prepare_datasets(load_config(None, dict(dataset="r", dataset_dir=str(tmp_path), template="empty")), tok)
    assert [(e["text"], e["label_id"]) for e in data.train] == [("nice one", 1), ("awful", 0)]
    assert data.label_names == ["neg", "pos"]


def test_parquet_reads_or_says_what_is_missing(tok, tmp_path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        from steadytune.errors import DataError
        (tmp_path / "x.parquet").write_bytes(b"PAR1")
        with pytest.raises(DataError, match=r"x\.parquet: reading parquet needs pyarrow"):
            prepare_datasets(load_config(None, dict(dataset=str(tmp_path / "x.parquet"))), tok)
        return
    pq.write_table(pa.table({"instruction": ["a", "b"], "input": ["", ""], "output": ["x", "y"]}), tmp_path / "x.parquet")
    data = prepare_datasets(load_config(None, dict(dataset=str(tmp_path / "x.parquet"), template="empty")), tok)
    assert [trained_text(tok, e) for e in data.train] == ["x", "y"]   # LLaMA-Factory's empty adds no end token


# ---- batching ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_collator(side):
    examples = [{"input_ids": [5, 6, 7], "labels": [IGNORE_INDEX, 6, 7], "label_id": 1},
                {"input_ids": [8], "labels": [8], "label_id": 0}]
    batch = PadCollator(pad_token_id=0, padding_side=side)(examples)
    if side == "right":
        assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
        assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
        assert batch["labels"].tolist() == [[IGNORE_INDEX, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]
    else:
        assert batch["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
        assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
        assert batch["labels"].tolist() == [[IGNORE_INDEX, 6, 7], [IGNORE_INDEX, IGNORE_INDEX, 8]]
    assert batch["label_ids"].tolist() == [1, 0]
    assert "label_ids" not in PadCollator(0)([{"input_ids": [1], "labels": [1]}])


def test_empty_template_adds_no_bos_to_conversations_but_classification_keeps_the_tokenizers(tmp_path):
    from tokenizers import processors
    tok = build_tokenizer()
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    assert tok("Hi")["input_ids"][0] == bos   # a Gemma/Llama-like tokenizer
    assert get_template("empty", tok).render(TURNS)[0].text == "Hi"   # conversations: LLaMA-Factory's empty
    path = write_classification(tmp_path, 2, 2)
    data = prepare_datasets(load_config(None, dict(dataset=str(path), template="empty", label_names=["neg", "pos"],
                                                   prompt_template="{text} =>")), tok)
    assert all(e["input_ids"][0] == bos and e["input_ids"].count(bos) == 1 for e in data.train)
