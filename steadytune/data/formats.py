"""Convert rows of each dataset format into one of two normalised shapes.

- a conversation: {"messages": [{"role", "content"}, ...], "system": str | None, "tools": str | None}
  with roles user / assistant / function_call / observation, alternating user side then assistant side;
- a classification row: {"text": str, "label": str, "label_id": int}.

A converter returns None for a row that is dropped on purpose (empty answer, empty text) and raises DataError
(file + row) for a row that is malformed, because silently dropping those would hide a broken file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from steadytune.data.readers import Row
from steadytune.data.templates import ASSISTANT, ASSISTANT_SIDE, FUNCTION, OBSERVATION, USER, USER_SIDE
from steadytune.errors import DataError

FORMATS = ("alpaca", "sharegpt", "openai", "classification")

DEFAULT_COLUMNS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output", "system": "system", "history": "history"},
    "sharegpt": {"messages": "conversations", "system": "system", "tools": "tools"},
    "openai": {"messages": "messages", "system": "system", "tools": "tools"},
    "classification": {"text": "text", "label": "label"},
}
# Preference columns (read by data/preference.py only): ranking pairs and KTO's desirable/undesirable tag.
for _style in ("alpaca", "sharegpt", "openai"):
    DEFAULT_COLUMNS[_style].update(chosen="chosen", rejected="rejected", kto_tag="kto_tag")
DEFAULT_TAGS = {
    "sharegpt": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"},
    "openai": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
               "observation_tag": "tool", "function_tag": "function", "system_tag": "system"},
}
# Media columns of LLaMA-Factory's multimodal datasets: refused rather than trained on as if text-only.
MEDIA_COLUMNS = ("images", "videos", "audios")


@dataclass
class FormatSpec:
    """How to read one dataset's rows: its format, column names and role tags (after user remapping)."""

    formatting: str
    columns: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    label_names: Optional[list[str]] = None   # classification only

    @classmethod
    def build(cls, formatting: str, columns: dict | None = None, tags: dict | None = None,
              label_names: list[str] | None = None) -> "FormatSpec":
        merged_tags = dict(DEFAULT_TAGS.get(formatting, {}))
        merged_tags.update(tags or {})
        merged_columns = dict(DEFAULT_COLUMNS[formatting])
        merged_columns.update(columns or {})
        return cls(formatting, merged_columns, merged_tags, label_names)


def _column(row: Row, spec: FormatSpec, key: str, required: bool) -> Any:
    name = spec.columns.get(key)
    if name is None:
        return None
    if name not in row.data:
        if required:
            found = ", ".join(map(str, row.data)) or "(none)"
            raise DataError(f"{row.where}: missing column {name!r} ({spec.formatting} `{key}`); columns found: {found}")
        return None
    return row.data[name]


def _text(value: Any, row: Row, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        raise DataError(f"{row.where}: {what} must be text, got {type(value).__name__}")
    return str(value)


def alpaca_prompt(row: Row, spec: FormatSpec) -> tuple[list[dict], str | None]:
    """(turns up to and including the user's question, system prompt) of an alpaca row: history pairs, then
    instruction and input joined by a newline (LLaMA-Factory's "prompt\nquery")."""
    prompt = _text(_column(row, spec, "prompt", True), row, "instruction")
    query = _text(_column(row, spec, "query", False), row, "input")
    messages = []
    history = _column(row, spec, "history", False) or []
    if not isinstance(history, list):
        raise DataError(f"{row.where}: history must be a list of [question, answer] pairs")
    for i, pair in enumerate(history):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise DataError(f"{row.where}: history[{i}] must be a [question, answer] pair")
        messages += [{"role": USER, "content": str(pair[0])}, {"role": ASSISTANT, "content": str(pair[1])}]
    content = "\n".join(part for part in (prompt, query) if part)
    messages.append({"role": USER, "content": content})
    system = _text(_column(row, spec, "system", False), row, "system") or None
    return messages, system


def convert_alpaca(row: Row, spec: FormatSpec) -> dict | None:
    _column(row, spec, "prompt", True)  # a missing instruction column is named before a missing output column
    response = _text(_column(row, spec, "response", True), row, "output")
    if not response.strip():
        return None
    messages, system = alpaca_prompt(row, spec)
    messages.append({"role": ASSISTANT, "content": response})
    return {"messages": messages, "system": system, "tools": None}


def conversation_turns(row: Row, spec: FormatSpec) -> tuple[list[dict], str | None]:
    """(turns, system prompt) of a sharegpt/openai row: role tags mapped, a leading system turn taken out, and
    the turns checked to alternate user side / assistant side, starting with the user."""
    turns = _column(row, spec, "messages", True)
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{row.where}: column {spec.columns['messages']!r} must be a non-empty list of turns")
    tags = spec.tags
    system = _text(_column(row, spec, "system", False), row, "system") or None
    messages = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or tags["role_tag"] not in turn:
            raise DataError(f"{row.where}: turn {i} has no {tags['role_tag']!r} field")
        tag = turn[tags["role_tag"]]
        if i == 0 and tag == tags["system_tag"]:
            system = _text(turn.get(tags["content_tag"]), row, "system turn")
            continue
        expect_user = len(messages) % 2 == 0
        message = message_of(turn, spec, row, f"turn {i}")
        if expect_user != (message["role"] in USER_SIDE):
            wanted = f"{tags['user_tag']}/{tags['observation_tag']}" if expect_user else \
                f"{tags['assistant_tag']}/{tags['function_tag']}"
            raise DataError(f"{row.where}: turn {i} is {tag!r} but a {wanted} turn was expected "
                            f"(turns must alternate, starting with the user)")
        messages.append(message)
    return messages, system


def message_of(turn: Any, spec: FormatSpec, row: Row, what: str) -> dict:
    """One sharegpt/openai turn as {"role", "content"} with our role names."""
    tags = spec.tags
    if not isinstance(turn, dict) or tags["role_tag"] not in turn:
        raise DataError(f"{row.where}: {what} has no {tags['role_tag']!r} field")
    role_of = {tags["user_tag"]: USER, tags["assistant_tag"]: ASSISTANT, tags["observation_tag"]: OBSERVATION,
               tags["function_tag"]: FUNCTION}
    tag, content = turn[tags["role_tag"]], turn.get(tags["content_tag"])
    if spec.formatting == "openai" and tag == tags["assistant_tag"] and turn.get("tool_calls"):
        tag, content = tags["function_tag"], json.dumps(turn["tool_calls"], ensure_ascii=False)
    if tag not in role_of:
        raise DataError(f"{row.where}: {what} has unknown role {tag!r} (expected one of {', '.join(role_of)})")
    return {"role": role_of[tag], "content": _text(content, row, what)}


def convert_conversation(row: Row, spec: FormatSpec) -> dict | None:
    """sharegpt and openai: a list of turns with role tags; the first may be the system prompt."""
    messages, system = conversation_turns(row, spec)
    tags = spec.tags
    if not messages or messages[-1]["role"] not in ASSISTANT_SIDE:
        raise DataError(f"{row.where}: the conversation must end with an answer "
                        f"({tags['assistant_tag']}/{tags['function_tag']}) turn")
    return {"messages": messages, "system": system, "tools": _tools(_column(row, spec, "tools", False))}


def tools_of(row: Row, spec: FormatSpec) -> str | None:
    return _tools(_column(row, spec, "tools", False))


def _tools(value: Any) -> str | None:
    """Tool definitions as a JSON string, or None when there are none ("[]" is common in sharegpt files)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else None
        except ValueError:
            return value   # not JSON: passed on as the user wrote it
    else:
        parsed = value
    return json.dumps(parsed, ensure_ascii=False) if parsed else None


def convert_classification(row: Row, spec: FormatSpec) -> dict | None:
    text = _text(_column(row, spec, "text", True), row, "text").strip()
    label = _column(row, spec, "label", True)
    if not text:
        return None
    names = spec.label_names or []
    key = str(label).strip() if label is not None else ""
    if key in names:
        label_id = names.index(key)
    elif isinstance(label, int) and not isinstance(label, bool) and 0 <= label < len(names):
        label_id = label  # an integer class index into label_names
    else:
        raise DataError(f"{row.where}: label {label!r} is not in label_names {names}")
    return {"text": text, "label": names[label_id], "label_id": label_id}


CONVERTERS: dict[str, Callable[[Row, FormatSpec], Optional[dict]]] = {
    "alpaca": convert_alpaca,
    "sharegpt": convert_conversation,
    "openai": convert_conversation,
    "classification": convert_classification,
}


def guess_formatting(row: dict) -> str | None:
    """Format of a file given by path (no dataset_info entry), from its first row's columns."""
    if "conversations" in row:
        return "sharegpt"
    if "messages" in row:
        return "openai"
    if "instruction" in row and "output" in row:
        return "alpaca"
    if "text" in row and "label" in row:
        return "classification"
    return None
