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

from steadytune.config import show_value
from steadytune.data.multimodal.rows import media_of
from steadytune.data.readers import Row
from steadytune.data.templates import ASSISTANT, ASSISTANT_SIDE, FUNCTION, OBSERVATION, USER, USER_SIDE
from steadytune.errors import DataError

FORMATS = ("alpaca", "sharegpt", "openai", "classification")

# LLaMA-Factory's column defaults (DatasetAttr). As there, an entry that has a `columns` mapping uses exactly the
# columns it names (e.g. a sharegpt entry reads `tools` only when it maps it); an entry without one uses these.
DEFAULT_COLUMNS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output"},
    "sharegpt": {"messages": "conversations"},
    "openai": {"messages": "conversations"},
    "classification": {"text": "text", "label": "label"},
}
# Preference columns (read by data/preference.py only): ranking pairs and KTO's desirable/undesirable tag.
for _style in ("alpaca", "sharegpt", "openai"):
    DEFAULT_COLUMNS[_style].update(chosen="chosen", rejected="rejected", kto_tag="kto_tag")
# A file given by path has no dataset_info entry to map its columns: these optional ones are read when present.
PATH_COLUMNS = {
    "alpaca": {"system": "system", "history": "history"},
    "sharegpt": {"system": "system", "tools": "tools"},
    "openai": {"messages": "messages", "system": "system", "tools": "tools"},
}
for _style in PATH_COLUMNS:   # LLaMA-Factory's media columns, read when a row has them (data/multimodal/rows.py)
    PATH_COLUMNS[_style].update(images="images", videos="videos", audios="audios")
# sharegpt's role tags are LLaMA-Factory's defaults for both sharegpt and openai (an openai entry names its own).
DEFAULT_TAGS = {
    "sharegpt": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"},
}
# openai files carry OpenAI's own role names (an entry can still name others in `tags`).
DEFAULT_TAGS["openai"] = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
                          "observation_tag": "tool", "function_tag": "function", "system_tag": "system"}
# Media columns of LLaMA-Factory's multimodal datasets; audio is refused (images and videos: data/multimodal/).
MEDIA_COLUMNS = ("images", "videos", "audios")
UNSUPPORTED_MEDIA_COLUMNS = ("audios",)
# Why stage sft leaves a row out (counted in the data report; LLaMA-Factory drops the same rows).
KTO_ROW = "kto_tag row (stage sft leaves KTO-labelled rows out, desirable and undesirable, as LLaMA-Factory does)"
NO_ANSWER_ROW = "no output (a row without an answer is not an SFT example)"


@dataclass
class FormatSpec:
    """How to read one dataset's rows: its format, column names and role tags (after user remapping)."""

    formatting: str
    columns: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    label_names: Optional[list[str]] = None   # classification only

    @classmethod
    def build(cls, formatting: str, columns: dict | None = None, tags: dict | None = None,
              label_names: list[str] | None = None, from_path: bool = False) -> "FormatSpec":
        merged_tags = dict(DEFAULT_TAGS.get(formatting, {}))
        merged_tags.update(tags or {})
        if columns is None:
            merged_columns = dict(DEFAULT_COLUMNS[formatting])
            if from_path:
                merged_columns.update(PATH_COLUMNS.get(formatting, {}))
        elif formatting == "classification":   # our own format: named columns override the defaults
            merged_columns = {**DEFAULT_COLUMNS[formatting], **columns}
        else:
            merged_columns = dict(columns)
        return cls(formatting, merged_columns, merged_tags, label_names)


def column_names(data: dict, limit: int = 20) -> str:
    """A row's column names for a message: as written when plain, quoted (escaped) when odd, at most `limit`."""
    names = [str(k) if str(k).isprintable() and len(str(k)) <= 40 else show_value(str(k), 40) for k in list(data)[:limit]]
    return (", ".join(names) + (f", ... ({len(data)} in all)" if len(data) > limit else "")) or "(none)"


def _column(row: Row, spec: FormatSpec, key: str, required: bool) -> Any:
    name = spec.columns.get(key)
    if name is None:
        return None
    if name not in row.data:
        if required:
            found = column_names(row.data)
            raise DataError(f"{row.where}: missing column {show_value(name)} ({spec.formatting} `{key}`); columns found: {found}")
        return None
    return row.data[name]


def _text(value: Any, row: Row, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        raise DataError(f"{row.where}: {what} must be text, got {type(value).__name__}")
    return str(value)


def _kto_tag(row: Row, spec: FormatSpec) -> dict:
    """{"kto_tag": bool} for a row of KTO data (a boolean in the kto_tag column; stage sft leaves it out)."""
    tag = _column(row, spec, "kto_tag", False)
    return {"kto_tag": tag} if isinstance(tag, bool) else {}


def alpaca_prompt(row: Row, spec: FormatSpec) -> tuple[list[dict], str]:
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
    return messages, _text(_column(row, spec, "system", False), row, "system")


def convert_alpaca(row: Row, spec: FormatSpec) -> dict:
    """instruction (+ input) as the user turn, output as the answer. A row whose output is missing has no answer
    turn: stage pt reads its text, stage sft leaves it out (as LLaMA-Factory's unsupervised rows)."""
    messages, system = alpaca_prompt(row, spec)
    response = _column(row, spec, "response", False) if spec.columns.get("response") else None
    not_text = {}
    if isinstance(response, str):
        messages.append({"role": ASSISTANT, "content": response})
    elif response is not None:  # LLaMA-Factory reads only a string as the answer; the row is left out, and said so
        not_text = {"left_out": ("output is not text", f"{row.where}, {type(response).__name__}")}
    return {"messages": messages, "system": system, "tools": tools_of(row, spec), **_kto_tag(row, spec), **not_text,
            **media_of(row.data, spec.columns, row.where)}


def conversation_turns(row: Row, spec: FormatSpec) -> tuple[list[dict], str]:
    """(turns, system prompt) of a sharegpt/openai row, as LLaMA-Factory's converters read it: role tags mapped,
    a leading system turn taken out, openai `tool_calls` made tool-call turns and consecutive tool results joined,
    and the turns checked to alternate user side / assistant side, starting with the user."""
    turns = _column(row, spec, "messages", True)
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{row.where}: column {show_value(spec.columns['messages'])} must be a non-empty list of turns")
    tags = spec.tags
    openai = spec.formatting == "openai"
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or tags["role_tag"] not in turn:
            raise DataError(f"{row.where}: turn {i} has no {show_value(tags['role_tag'])} field")
    if turns[0][tags["role_tag"]] == tags["system_tag"]:
        system = _text(turns[0].get(tags["content_tag"]), row, "system turn")
        turns = turns[1:]
    else:
        system = _text(_column(row, spec, "system", False), row, "system")
    messages: list[dict] = []
    tags_seen: list[str] = []   # each message's tag as the file wrote it, for error messages
    tool_results: list[str] = []

    def flush_tool_results() -> None:
        if tool_results:
            messages.append({"role": OBSERVATION, "content": "\n</tool_response>\n<tool_response>\n".join(tool_results)})
            tags_seen.append(tags["observation_tag"])
            tool_results.clear()

    for i, turn in enumerate(turns):
        if openai and turn[tags["role_tag"]] == tags["observation_tag"]:
            tool_results.append(_text(turn.get(tags["content_tag"]), row, f"turn {i}"))  # one turn for consecutive results
            continue
        flush_tool_results()
        messages.append(message_of(turn, spec, row, f"turn {i}"))
        tags_seen.append(turn[tags["role_tag"]])
    flush_tool_results()
    for i, message in enumerate(messages):
        expect_user = i % 2 == 0
        if expect_user != (message["role"] in USER_SIDE):
            wanted = f"{tags['user_tag']}/{tags['observation_tag']}" if expect_user else \
                f"{tags['assistant_tag']}/{tags['function_tag']}"
            raise DataError(f"{row.where}: turn {i} is {show_value(tags_seen[i])} but a {wanted} turn was expected "
                            f"(turns must alternate, starting with the user)")
    return messages, system


def message_of(turn: Any, spec: FormatSpec, row: Row, what: str) -> dict:
    """One sharegpt/openai turn as {"role", "content"} with our role names (openai tool calls: as LLaMA-Factory,
    the calls' `function` objects as a JSON list make a tool-call turn)."""
    tags = spec.tags
    if not isinstance(turn, dict) or tags["role_tag"] not in turn:
        raise DataError(f"{row.where}: {what} has no {show_value(tags['role_tag'])} field")
    role_of = {tags["user_tag"]: USER, tags["assistant_tag"]: ASSISTANT, tags["observation_tag"]: OBSERVATION,
               tags["function_tag"]: FUNCTION}
    tag, content = turn[tags["role_tag"]], turn.get(tags["content_tag"])
    if not isinstance(tag, str):
        raise DataError(f"{row.where}: {what} has role {show_value(tag)}, which is not text (expected one of "
                        f"{', '.join(role_of)})")
    if spec.formatting == "openai" and tag in (tags["assistant_tag"], tags["function_tag"]) and turn.get("tool_calls"):
        calls = turn["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) and "function" in c for c in calls):
            raise DataError(f"{row.where}: {what}: tool_calls must be a list of {{\"function\": ...}} objects "
                            f"(got {show_value(calls)})")
        tag, content = tags["function_tag"], json.dumps([c["function"] for c in calls], ensure_ascii=False)
    if tag not in role_of:
        raise DataError(f"{row.where}: {what} has unknown role {show_value(tag)} (expected one of {', '.join(role_of)})")
    return {"role": role_of[tag], "content": _text(content, row, what)}


def convert_conversation(row: Row, spec: FormatSpec) -> dict:
    """sharegpt and openai: a list of turns with role tags; the first may be the system prompt."""
    messages, system = conversation_turns(row, spec)
    tags = spec.tags
    if not messages or messages[-1]["role"] not in ASSISTANT_SIDE:
        raise DataError(f"{row.where}: the conversation must end with an answer "
                        f"({tags['assistant_tag']}/{tags['function_tag']}) turn")
    tools = tools_of(row, spec)
    if spec.formatting == "openai":
        system = _openai_system(system, tools)
    return {"messages": messages, "system": system, "tools": tools, **_kto_tag(row, spec),
            **media_of(row.data, spec.columns, row.where)}


def tools_of(row: Row, spec: FormatSpec) -> str | None:
    return _tools(_column(row, spec, "tools", False))


def _openai_system(system: str, tools: str | None) -> str:
    """LLaMA-Factory's openai converter (since 0.9.4) adds "detailed thinking off" to the system prompt of rows
    without tools, and a line break to the system prompt of rows with tools; done here too so that the same file
    trains on the same text."""
    if tools:
        return system + "\n" if system else system
    if not system:
        return "detailed thinking off"
    if "detailed thinking on" in system or "detailed thinking off" in system:
        return system
    return system + "\ndetailed thinking off"


def _tools(value: Any) -> str | None:
    """Tool definitions as the JSON text a template describes; None when the row has none. An empty list "[]"
    stays: as in LLaMA-Factory it still opens the system slot (with no tool text in it)."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


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
        raise DataError(f"{row.where}: label {show_value(label)} is not in label_names {names}")
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
