"""Every template name we accept builds the token ids and loss masks LLaMA-Factory builds.

tests/golden/templates/<name>.json holds ids LLaMA-Factory itself produced (tools/make_template_golden.py) for a
fixed set of conversations (single turn, multi-turn, system prompt, tool call and result, empty system, think
blocks) under the data keys that change the encoding (mask_history, train_on_prompt, cutoff_len, enable_thinking,
tool_format, default_system), with two tokenizers (byte-level BPE, and SentencePiece-like with a prefix space).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from steadytune.config import ConfigError
from steadytune.data import tools as tool_formats
from steadytune.data.encode import IGNORE_INDEX, encode_conversation, encode_prediction
from steadytune.data.templates import FUNCTION, OWN_TEMPLATES, TEMPLATES, get_template

GOLDEN = Path(__file__).parent / "golden"
INPUTS = json.loads((GOLDEN / "templates" / "conversations.json").read_text(encoding="utf-8"))
NAMES = sorted(set(TEMPLATES) - OWN_TEMPLATES) + ["auto"]


def load_tokenizer(style: str, chat_template: str | None = None) -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast.from_pretrained(GOLDEN / "tokenizers" / style)
    tok.chat_template = chat_template
    return tok


def expected_labels(case: dict) -> list[int]:
    other = case.get("other_labels", {})
    return [other.get(str(i), tok if flag == "1" else IGNORE_INDEX)
            for i, (tok, flag) in enumerate(zip(case["input_ids"], case["mask"]))]


def test_every_template_has_golden_ids():
    assert {p.stem for p in (GOLDEN / "templates").glob("*.json")} - {"conversations"} == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_template_matches_llamafactory(name, monkeypatch):
    monkeypatch.setattr(tool_formats, "today", lambda: INPUTS["llama3_date"])
    golden = json.loads((GOLDEN / "templates" / f"{name}.json").read_text(encoding="utf-8"))
    tokenizers = {style: load_tokenizer(style, INPUTS["chat_template"] if name == "auto" else None)
                  for style in ("bytelevel", "metaspace")}
    checked = 0
    for key, case in golden["cases"].items():
        style, variant, conv_name = key.split("/")[:3]
        keys = dict(INPUTS["variants"][variant])
        conv = INPUTS["conversations"][conv_name]
        example = {"messages": [{"role": FUNCTION if m["role"] == "function" else m["role"], "content": m["content"]}
                                for m in conv["messages"]], "system": conv["system"], "tools": conv["tools"]}
        template = get_template(name, tokenizers[style], tool_format=keys.get("tool_format"),
                                default_system=keys.get("default_system"),
                                enable_thinking=keys.get("enable_thinking", True))
        run = lambda: encode_conversation(template, tokenizers[style], example, keys.get("cutoff_len", 4096),  # noqa: E731
                                          keys.get("train_on_prompt", False), keys.get("mask_history", False))
        if key.endswith("/predict"):  # do_predict's encoding of the same conversation
            prompt, answer = encode_prediction(template, tokenizers[style], example, keys.get("cutoff_len", 4096))
            assert (prompt, answer) == (case["prompt_ids"], case["answer_ids"]), f"{name} {key}"
            continue
        if "error" in case:
            with pytest.raises(ConfigError):
                run()
            continue
        encoded, _ = run()
        if all(label == IGNORE_INDEX for label in expected_labels(case)):
            # Truncation left no trained token: LLaMA-Factory keeps the row (it adds nothing to the loss), we drop
            # it and count it in the data report.
            assert encoded is None, key
            continue
        assert encoded is not None, key
        assert encoded["input_ids"] == case["input_ids"], f"{name} {key}: input ids differ from LLaMA-Factory's"
        assert encoded["labels"] == expected_labels(case), f"{name} {key}: loss mask differs from LLaMA-Factory's"
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("style", ["bytelevel", "metaspace"])
def test_empty_eos_encodes_as_a_plain_transformers_script(style):
    """empty_eos: the prompt as `tokenizer(prompt)` gives it (with the bos the tokenizer adds: the metaspace one
    does, like Gemma's; the byte-level one does not, like Qwen's), the answer + eos as the trained target. LF's
    `empty` has neither the bos nor the eos."""
    tok = load_tokenizer(style)
    example = {"messages": [{"role": "user", "content": "Review: fine\nSentiment:"},
                            {"role": "assistant", "content": "positive"}], "system": "", "tools": ""}
    prompt = tok("Review: fine\nSentiment:")["input_ids"]
    answer = tok("positive", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    encoded, _ = encode_conversation(get_template("empty_eos", tok), tok, example, 4096, False, False)
    assert encoded["input_ids"] == prompt + answer
    assert encoded["labels"] == [IGNORE_INDEX] * len(prompt) + answer
    empty, _ = encode_conversation(get_template("empty", tok), tok, example, 4096, False, False)
    bos = 1 if style == "metaspace" else 0
    assert (prompt[0] == tok.bos_token_id) == (style == "metaspace")
    assert empty["input_ids"] == prompt[bos:] + answer[:-1]


def test_qwen3_nothink_adds_no_think_block():
    """LLaMA-Factory's qwen3_nothink is plain ChatML: no empty think block after the assistant header."""
    tok = load_tokenizer("bytelevel")
    pieces = get_template("qwen3_nothink", tok).render([{"role": "user", "content": "Hi"},
                                                        {"role": "assistant", "content": "Yo"}])
    assert [p.text for p in pieces] == ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "Yo<|im_end|>\n"]
    thinking = get_template("qwen3", tok).render([{"role": "user", "content": "Hi"},
                                                  {"role": "assistant", "content": "Yo"}])
    assert thinking[1].text == "<think>\n\n</think>\n\nYo<|im_end|>\n" and thinking[1].trainable


PRETRAIN = json.loads((GOLDEN / "pretrain.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("key", sorted(PRETRAIN["cases"]))
def test_pretrain_blocks_match_llamafactory(key):
    """stage pt: concatenate + cut per preprocessing batch and shard (packing), or truncate each text."""
    from steadytune.data.pretrain import end_of_text, pretrain_blocks

    style, packing, template, batch, workers = (part.split("=")[-1] for part in key.split("/"))
    case = PRETRAIN["cases"][key]
    tok = load_tokenizer(style)
    eos = end_of_text(template, get_template(template, tok).eos_token)
    blocks = pretrain_blocks(tok, PRETRAIN["texts"], eos, case["cutoff_len"], packing != "False",
                             batch_size=int(batch), num_workers=None if workers == "None" else int(workers))
    assert blocks == case["input_ids"]
