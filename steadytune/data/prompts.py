"""Prompt data for stage grpo: LLaMA-Factory's rows (alpaca, sharegpt, openai, classification), read by the same
registry and readers as every other stage, each made into the prompt the policy completes plus what its reward
functions may read.

- alpaca: instruction (+ input, + history) is the prompt; `output`, when present, is the reference answer;
- sharegpt / openai: the turns up to the last user turn are the prompt; a final assistant turn is the reference; a
  row with tools (LLaMA-Factory's tool-call format: function_call and observation turns, a `tools` column) is cut at
  its last user turn, its tool definitions rendered into the system prompt as the template writes them (the policy's
  tool episodes: stages/episodes.py), its final assistant answer the reference;
- classification: the prompt_template with the text (as stage sft builds it); the gold label is the reference.

A tokenised example: {"input_ids": prompt ids (as the chat template renders the next answer's start), "labels":
all -100 (nothing is trained on the prompt), "prompt": the text of the last user turn (or the classification text),
"answer": the reference (or None), "columns": the row's own columns, JSON values as read}. The reward functions get
`prompts`, `completions` and each column by name (a `solution` or `answer` column is what the accuracy reward
compares with; stages/rewards.py). A prompt longer than cutoff_len keeps its last cutoff_len tokens (the question
and the start of the answer), and is counted as truncated.
"""

from __future__ import annotations

from typing import Any, Optional

from steadytune.config import ConfigError, RunConfig
from steadytune.data.encode import IGNORE_INDEX, encode_classification_prompt, encode_text
from steadytune.data.multimodal.encode import MediaContext, encode_multimodal_prompt, with_resolved_media
from steadytune.data.multimodal.rows import media_of
from steadytune.data.formats import (
    FormatSpec,
    _column,
    alpaca_prompt,
    convert_classification,
    conversation_turns,
    tools_of,
)
from steadytune.data.prepare import ExampleKind, _progress, count_truncation, datasets_of
from steadytune.data.readers import Row
from steadytune.data.registry import DatasetSource
from steadytune.data.templates import ASSISTANT, ASSISTANT_SIDE, USER, USER_SIDE, Template, encode_parts
from steadytune.errors import DataError

# Argument names the reward functions take themselves: a column of one of these names is not passed again.
RESERVED = ("prompts", "completions", "completion_ids")


def _columns(row: Row) -> dict:
    return {str(k): v for k, v in row.data.items() if str(k) not in RESERVED}


def convert_alpaca_prompt(row: Row, spec: FormatSpec) -> Optional[dict]:
    messages, system = alpaca_prompt(row, spec)
    if not messages[-1]["content"].strip():
        return None
    answer = _column(row, spec, "response", False) if spec.columns.get("response") else None
    return {"messages": messages, "system": system, "tools": None, "prompt": messages[-1]["content"],
            "answer": answer if isinstance(answer, str) else None, "columns": _columns(row),
            **media_of(row.data, spec.columns, row.where)}


def convert_conversation_prompt(row: Row, spec: FormatSpec) -> Optional[dict]:
    turns, system = conversation_turns(row, spec)
    tools = tools_of(row, spec)
    answer = None
    if tools and any(t["role"] == USER for t in turns):
        # A tool-call row (LLaMA-Factory's glaive format): the prompt ends at the last user turn; what follows (the
        # calls, their results, the final answer) is the row's reference episode, the final answer its reference.
        last = max(i for i, t in enumerate(turns) if t["role"] == USER)
        after = [t for t in turns[last + 1:] if t["role"] == ASSISTANT]
        answer = after[-1]["content"] if after else None
        turns = turns[:last + 1]
    elif turns and turns[-1]["role"] in ASSISTANT_SIDE:
        answer, turns = turns[-1]["content"], turns[:-1]
    if not turns or turns[-1]["role"] not in USER_SIDE:
        raise DataError(f"{row.where}: a grpo prompt must end with a user turn (optionally followed by the reference "
                        "answer)")
    if not str(turns[-1]["content"]).strip():
        return None
    return {"messages": turns, "system": system, "tools": tools, "prompt": str(turns[-1]["content"]),
            "answer": answer, "columns": _columns(row), **media_of(row.data, spec.columns, row.where)}


def convert_classification_prompt(row: Row, spec: FormatSpec) -> Optional[dict]:
    example = convert_classification(row, spec)
    if example is None:
        return None
    columns = {**_columns(row), "label": example["label"], "label_id": example["label_id"]}
    return {**example, "prompt": example["text"], "answer": example["label"], "columns": columns}


def _check_prompt_source(src: DatasetSource, rows: list[Row], formatting: str) -> None:
    if src.ranking:
        raise ConfigError(f"dataset: {src.name} is a ranking dataset (chosen/rejected pairs); stage grpo reads prompts "
                          "(alpaca, sharegpt, openai or classification rows) and generates its own answers")


def encode_prompt(template: Template, tokenizer: Any, example: dict, cfg: RunConfig) -> tuple[list[int], int]:
    """(the prompt ids the policy completes, tokens cutoff_len cut from it): the conversation up to where the next
    answer starts (its first tokens cut when it is too long), or the classification prompt (its text's end cut, as
    stage sft cuts it)."""
    d = cfg.data
    if "text" in example and "label_id" in example:
        text_ids = encode_text(tokenizer, example["text"])
        whole = encode_classification_prompt(template, tokenizer, d.prompt_template, "", d.cutoff_len + len(text_ids),
                                              text_ids)
        cut = max(0, len(whole) - d.cutoff_len)
        return (encode_classification_prompt(template, tokenizer, d.prompt_template, "", d.cutoff_len, text_ids)
                if cut else whole), cut
    ids = encode_parts(tokenizer, template.generation_prompt_parts(example["messages"], example.get("system"),
                                                                   example.get("tools")))
    cut = max(0, len(ids) - d.cutoff_len)
    return ids[cut:], cut


def tokenize_prompts(examples: list[dict], split_name: str, template: Template, cfg: RunConfig, tokenizer: Any,
                     stats: dict, media: Optional[MediaContext] = None) -> list[dict]:
    """Each prompt's ids and what its reward functions read; a conversation's tool definitions (its `tools` column,
    which a tool episode checks against the tools given); a prompt with images, its media references, grids and
    token types (the roll-out makes pixels from them: data/multimodal/)."""
    d = cfg.data
    media_dir = d.media_dir if d.media_dir is not None else d.dataset_dir
    out = []
    with _progress(len(examples), split_name) as bar:
        for example in examples:
            extra: dict = {}
            if example.get("images") or example.get("videos"):
                if media is None:
                    raise DataError(f"{example.get('where', 'row')}: the row has images or videos, and the model has "
                                    "no image processor (a text-only model?); train a vision-language model")
                extra, cut = encode_multimodal_prompt(template, media, with_resolved_media(example, media_dir),
                                                      d.cutoff_len)
                ids = extra.pop("input_ids")
            else:
                ids, cut = encode_prompt(template, tokenizer, example, cfg)
            count_truncation(stats, split_name, cut, 0)
            out.append({"input_ids": ids, "labels": [IGNORE_INDEX] * len(ids), "prompt": example["prompt"],
                        "answer": example["answer"], "columns": example["columns"],
                        **({"tools": example["tools"]} if example.get("tools") else {}), **extra})
            bar.update()
    if not out:
        raise DataError(f"{split_name} data ({datasets_of(cfg, split_name)}) holds no prompt")
    return out


PROMPTS = ExampleKind("prompts", {"alpaca": convert_alpaca_prompt, "sharegpt": convert_conversation_prompt,
                                  "openai": convert_conversation_prompt,
                                  "classification": convert_classification_prompt},
                      tokenize_prompts, _check_prompt_source, classification=True, media_stages=("grpo",))
