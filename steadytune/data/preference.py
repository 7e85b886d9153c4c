"""Preference data: LLaMA-Factory's ranking rows (a prompt with a chosen and a rejected answer) for dpo and rm,
and its feedback rows (a prompt with one answer tagged desirable or not, `kto_tag`) for kto.

Rows are read by the same registry and readers as sft data (dataset_info.json entries with `ranking: true`, or
`columns: {kto_tag: ...}`), in alpaca, sharegpt or openai style, and normalised to
- a pair:     {"messages": prompt turns ending on the user side, "chosen": turn, "rejected": turn, "system", "tools"}
- a feedback: {"messages": prompt turns ending on the user side, "answer": turn, "kto_tag": bool, "system", "tools"}

A tokenised example keeps the sequences one after the other in `input_ids` / `labels`, with their `lengths`:
a pair is [prompt + chosen, prompt + rejected]; a feedback example is [prompt + answer, prompt + the answer of
another example] (the mismatched pair that KTO's KL estimate needs; LLaMA-Factory pairs each prompt with the
previous example's answer, and so do we). So `len(input_ids)` is what the example costs in a batch, and the
token-budget batching, the cache and the statistics of sft data work unchanged. Labels are -100 on the prompt:
only answer tokens are scored.

Truncation follows LLaMA-Factory's `infer_seqlen`: the prompt and the (longer) answer share cutoff_len, the answer
keeping more when both are long, and the chosen and rejected answers are cut to the same length after the same
prompt, so the two sequences of a pair stay comparable.
"""

from __future__ import annotations

from typing import Any, Optional

from steadytune.config import ConfigError, RunConfig, show_value
from steadytune.data.encode import IGNORE_INDEX, encode_oneturn, infer_seqlen
from steadytune.data.formats import (
    ASSISTANT,
    FormatSpec,
    _column,
    _text,
    alpaca_prompt,
    conversation_turns,
    guess_formatting,
    message_of,
    tools_of,
)
from steadytune.data.prepare import ExampleKind, _progress, count_truncation, datasets_of
from steadytune.data.multimodal.encode import MediaContext, with_resolved_media
from steadytune.data.multimodal.pairs import encode_multimodal_pair
from steadytune.data.multimodal.rows import media_of
from steadytune.data.readers import Row
from steadytune.data.registry import DatasetSource
from steadytune.data.templates import ASSISTANT_SIDE, USER_SIDE, Template
from steadytune.errors import DataError

# --------------------------------------------------------------------------------------------------------
# Converting rows
# --------------------------------------------------------------------------------------------------------

def _answer(value: Any, spec: FormatSpec, row: Row, what: str) -> dict:
    """A chosen/rejected/answer cell: a turn {from/role, value/content} (sharegpt, openai) or plain text (alpaca)."""
    if isinstance(value, dict) and spec.formatting == "alpaca":
        raise DataError(f"{row.where}: {what} must be text in an alpaca row, got a mapping (turns are sharegpt or "
                        "openai rows)")
    if isinstance(value, dict):
        message = message_of(value, spec, row, what)
        if message["role"] not in ASSISTANT_SIDE:
            raise DataError(f"{row.where}: {what} must be an answer ({spec.tags['assistant_tag']}/"
                            f"{spec.tags['function_tag']}) turn")
        return message
    if isinstance(value, str):
        return {"role": ASSISTANT, "content": value}
    raise DataError(f"{row.where}: {what} must be text or a turn, got {type(value).__name__}")


def _prompt_turns(row: Row, spec: FormatSpec) -> tuple[list[dict], Optional[str], Optional[str]]:
    """(prompt turns ending on the user side, system, tools) of a row in any of the three styles."""
    if spec.formatting == "alpaca":
        messages, system = alpaca_prompt(row, spec)
        return messages, system, None
    messages, system = conversation_turns(row, spec)
    return messages, system, tools_of(row, spec)


def convert_pair(row: Row, spec: FormatSpec) -> dict | None:
    """A ranking row; None when either answer is empty (dropped and counted, as sft drops empty answers)."""
    messages, system, tools = _prompt_turns(row, spec)
    if not messages or messages[-1]["role"] not in USER_SIDE:
        raise DataError(f"{row.where}: the prompt of a ranking row must end with a user turn (the chosen and "
                        "rejected answers follow it)")
    chosen = _answer(_column(row, spec, "chosen", True), spec, row, "chosen")
    rejected = _answer(_column(row, spec, "rejected", True), spec, row, "rejected")
    if not chosen["content"].strip() or not rejected["content"].strip():
        return None
    return {"messages": messages, "chosen": chosen, "rejected": rejected, "system": system, "tools": tools,
            **media_of(row.data, spec.columns, row.where)}


def convert_feedback(row: Row, spec: FormatSpec) -> dict | None:
    """A KTO row: a prompt and its answer (the last turn, or alpaca's output) with a true/false kto_tag."""
    tag = _column(row, spec, "kto_tag", True)
    if not isinstance(tag, bool):
        raise DataError(f"{row.where}: kto_tag column {show_value(spec.columns['kto_tag'])} must be true or false, got {show_value(tag)}")
    if spec.formatting == "alpaca":
        _column(row, spec, "prompt", True)
        answer = _answer(_text(_column(row, spec, "response", True), row, "output"), spec, row, "output")
        messages, system = alpaca_prompt(row, spec)
        tools = None
    else:
        turns, system = conversation_turns(row, spec)
        if len(turns) < 2 or turns[-1]["role"] not in ASSISTANT_SIDE:
            raise DataError(f"{row.where}: a kto row must end with the answer its kto_tag judges")
        messages, answer, tools = turns[:-1], turns[-1], tools_of(row, spec)
    if not answer["content"].strip():
        return None
    return {"messages": messages, "answer": answer, "kto_tag": tag, "system": system, "tools": tools}


def guess_pair_formatting(row: dict) -> str | None:
    """Format of a ranking file given by path: sharegpt/openai by their turns column, else alpaca by instruction."""
    if "conversations" in row:
        return "sharegpt"
    if "messages" in row:
        return "openai"
    if "instruction" in row:
        return "alpaca"
    return guess_formatting(row)


def _check_pair_source(src: DatasetSource, rows: list[Row], formatting: str) -> None:
    _check_style(src, formatting)
    has_pairs = src.ranking if src.ranking is not None else {"chosen", "rejected"} <= set(rows[0].data)
    if not has_pairs:
        raise ConfigError(f"dataset: {src.name} has no chosen/rejected pairs; stages dpo and rm train on ranking "
                          "datasets (`ranking: true` and chosen/rejected columns in dataset_info.json)")


def _check_feedback_source(src: DatasetSource, rows: list[Row], formatting: str) -> None:
    _check_style(src, formatting)
    if src.ranking:
        raise ConfigError(f"dataset: {src.name} is a ranking dataset; stage kto trains on rows with one answer and "
                          "a kto_tag (true: desirable, false: undesirable); use stage: dpo or rm for pairs")
    if "kto_tag" not in (src.columns or {}) and "kto_tag" not in rows[0].data:
        raise ConfigError(f"dataset: {src.name} has no kto_tag column; stage kto needs one (`columns: {{kto_tag: "
                          "label}}` in dataset_info.json, true for a desirable answer, false for an undesirable one)")


def _check_style(src: DatasetSource, formatting: str) -> None:
    if formatting not in ("alpaca", "sharegpt", "openai"):
        raise ConfigError(f"dataset: {src.name} is {formatting} data; preference stages read alpaca, sharegpt or "
                          "openai rows")


# --------------------------------------------------------------------------------------------------------
# Tokenising
# --------------------------------------------------------------------------------------------------------

def prompt_and_answer_ids(template: Template, tokenizer: Any, messages: list[dict], answer: dict,
                          system: Optional[str], tools: Optional[str]) -> tuple[list[int], list[int]]:
    """Token ids of everything before the final answer (history included) and of the answer with its end token,
    as LLaMA-Factory's pairwise and feedback processors build them (its one-turn encoding)."""
    return encode_oneturn(template, tokenizer, messages + [answer], system, tools)


def _sequence(prompt: list[int], answer: list[int]) -> tuple[list[int], list[int]]:
    return prompt + answer, [IGNORE_INDEX] * len(prompt) + answer


def encode_pair(template: Template, tokenizer: Any, example: dict, cutoff_len: int
                ) -> tuple[dict | None, tuple[int, int]]:
    """(pair example, (prompt tokens cut, answer tokens cut)); the example is None when truncation leaves no
    answer token."""
    common = (example["messages"], )
    prompt, chosen = prompt_and_answer_ids(template, tokenizer, *common, example["chosen"], example["system"],
                                           example["tools"])
    prompt_r, rejected = prompt_and_answer_ids(template, tokenizer, *common, example["rejected"], example["system"],
                                               example["tools"])
    if prompt_r != prompt:  # a template whose prompt depends on the answer cannot give comparable sequences
        raise ConfigError(f"template {template.name}: renders the prompt differently before the chosen and the "
                          "rejected answer; choose a named template")
    source, target = infer_seqlen(len(prompt), max(len(chosen), len(rejected)), cutoff_len)
    cut = (len(prompt) - source, max(0, len(chosen) - target) + max(0, len(rejected) - target))
    prompt, chosen, rejected = prompt[:source], chosen[:target], rejected[:target]
    if not chosen or not rejected:
        return None, cut
    ids_c, labels_c = _sequence(prompt, chosen)
    ids_r, labels_r = _sequence(prompt, rejected)
    return {"input_ids": ids_c + ids_r, "labels": labels_c + labels_r, "lengths": [len(ids_c), len(ids_r)]}, cut


def _truncated_sequence(prompt: list[int], answer: list[int], cutoff_len: int
                        ) -> tuple[list[int], list[int], tuple[int, int]]:
    source, target = infer_seqlen(len(prompt), len(answer), cutoff_len)
    ids, labels = _sequence(prompt[:source], answer[:target])
    return ids, labels, (len(prompt) - source, len(answer) - target)


def encode_feedback(template: Template, tokenizer: Any, example: dict, mismatched_answer: dict,
                    cutoff_len: int) -> tuple[dict | None, tuple[int, int]]:
    """(feedback example, (prompt tokens cut, answer tokens cut)): [prompt + answer, prompt + mismatched_answer]
    with the kto_tag."""
    system, tools = example["system"], example["tools"]
    prompt, answer = prompt_and_answer_ids(template, tokenizer, example["messages"], example["answer"], system, tools)
    ids, labels, (prompt_cut, answer_cut) = _truncated_sequence(prompt, answer, cutoff_len)
    kl_prompt, kl_answer = prompt_and_answer_ids(template, tokenizer, example["messages"], mismatched_answer,
                                                 system, tools)
    kl_ids, kl_labels, _ = _truncated_sequence(kl_prompt, kl_answer, cutoff_len)  # (the KL pair's cut: not data)
    if all(x == IGNORE_INDEX for x in labels) or all(x == IGNORE_INDEX for x in kl_labels):
        return None, (prompt_cut, answer_cut)
    return {"input_ids": ids + kl_ids, "labels": labels + kl_labels, "lengths": [len(ids), len(kl_ids)],
            "kto_tag": example["kto_tag"]}, (prompt_cut, answer_cut)


def _tokenize(encode, examples: list[dict], split_name: str, cfg: RunConfig, stats: dict) -> list[dict]:
    out = []
    with _progress(len(examples), split_name) as bar:
        for i, example in enumerate(examples):
            encoded, (prompt_cut, answer_cut) = encode(i, example)
            count_truncation(stats, split_name, prompt_cut, answer_cut)
            if encoded is None:
                stats["dropped"][f"{split_name}: no answer token within cutoff_len"] += 1
            else:
                out.append(encoded)
            bar.update()
    if not out:
        raise DataError(f"{split_name} data ({datasets_of(cfg, split_name)}) is empty after tokenisation: no example "
                        "keeps an answer token within "
                        f"cutoff_len={cfg.data.cutoff_len}")
    return out


def tokenize_pairs(examples: list[dict], split_name: str, template: Template, cfg: RunConfig, tokenizer: Any,
                   stats: dict, media: MediaContext | None = None) -> list[dict]:
    d = cfg.data
    media_dir = d.media_dir if d.media_dir is not None else d.dataset_dir

    def encode(i: int, example: dict):
        if example.get("images") or example.get("videos"):
            if media is None:
                raise DataError(f"{example.get('where', 'row')}: the row has images or videos, and the model has no "
                                "image processor (a text-only model?); train a vision-language model")
            return encode_multimodal_pair(template, media, with_resolved_media(example, media_dir), d.cutoff_len)
        return encode_pair(template, tokenizer, example, d.cutoff_len)

    return _tokenize(encode, examples, split_name, cfg, stats)


def tokenize_feedback(examples: list[dict], split_name: str, template: Template, cfg: RunConfig, tokenizer: Any,
                      stats: dict) -> list[dict]:
    tags = [e["kto_tag"] for e in examples]
    if all(tags) or not any(tags):
        stats["warnings"].append(f"{split_name}: every kto_tag is {tags[0]}: KTO learns from both kinds of answer")
    # Each prompt with the previous example's answer (the first with the last's): LLaMA-Factory's KL pairs.
    return _tokenize(lambda i, e: encode_feedback(template, tokenizer, e, examples[i - 1]["answer"],
                                                  cfg.data.cutoff_len), examples, split_name, cfg, stats)


STYLES = ("alpaca", "sharegpt", "openai")
PAIRS = ExampleKind("pairs", {style: convert_pair for style in STYLES}, tokenize_pairs, _check_pair_source,
                    guess_pair_formatting, media_stages=("dpo",))
FEEDBACK = ExampleKind("feedback", {style: convert_feedback for style in STYLES}, tokenize_feedback,
                       _check_feedback_source)
