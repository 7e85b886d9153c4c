"""Tool calling in a chat template's own words: how tool definitions enter the system prompt, and how an
assistant's tool call (a JSON `{"name", "arguments"}` object, or a list of them) is written out.

These are the tool formats of LLaMA-Factory (`data/tool_utils.py`, names as in its `tool_format` key), so that
glaive-style tool data renders to the same text here as there. Only the formats that our templates use are
implemented; an unknown `tool_format` is a configuration error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from steadytune.errors import DataError

# The fixed instructions around the tool list, as each model family was trained on them (facts, not prose).
_DEFAULT_HEADER = ("You have access to the following tools:\n{tool_text}"
                   "Use the following format if using a tool:\n```\n"
                   "Action: tool name (one of [{tool_names}])\n"
                   "Action Input: the input to the tool, in a JSON format representing the kwargs "
                   '(e.g. ```{{"input": "hello world", "num_beams": 5}}```)\n```\n')
_QWEN_HEADER = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}"
                "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, '
                '"arguments": <args-json-object>}}\n</tool_call>')
_QWEN35_HEADER = ("\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>{tool_text}"
                  "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
                  "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                  "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
                  "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
                  "- Function calls MUST follow the specified format: an inner <function=...></function> block must "
                  "be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
                  "- You may provide optional reasoning for your function call in natural language BEFORE the "
                  "function call, but NOT after\n- If there is no function call available, answer the question like "
                  "normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>")
_LLAMA3_HEADER = ("Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
                  "You have access to the following functions. To call a function, please respond with JSON for a "
                  'function call. Respond in the format {{"name": function name, "parameters": dictionary of '
                  'argument name and its value}}. Do not use variables.\n\n{tool_text}')
_GLM4_HEADER = ("你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
                "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{tool_text}")


def today() -> str:
    """The date Llama 3's tool header carries (a function so tests can pin it)."""
    return datetime.now().strftime("%d %b %Y")


def _dumps(value: Any, **kw) -> str:
    return json.dumps(value, ensure_ascii=False, **kw)


def _as_function(tool: dict) -> dict:
    """{"type": "function", "function": {...}} -> the inner function; a bare function stays as it is."""
    return tool.get("function", "") if tool.get("type") == "function" else tool


def _wrapped(tool: dict) -> dict:
    """The opposite: every tool as {"type": "function", "function": {...}}."""
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


# --- tool lists -> system prompt text --------------------------------------------------------------------

def _describe_default(tools: list[dict]) -> str:
    text, names = "", []
    for tool in map(_as_function, tools):
        params = tool["parameters"]
        lines = ""
        for name, spec in params["properties"].items():
            required = ", required" if name in params.get("required", []) else ""
            enum = ", should be one of [{}]".format(", ".join(spec["enum"])) if spec.get("enum") else ""
            items = ", where each item should be {}".format(spec["items"].get("type", "")) if spec.get("items") else ""
            lines += f"  - {name} ({spec.get('type', '')}{required}): {spec.get('description', '')}{enum}{items}\n"
        text += f"> Tool Name: {tool['name']}\nTool Description: {tool.get('description', '')}\nTool Args:\n{lines}\n"
        names.append(tool["name"])
    return _DEFAULT_HEADER.format(tool_text=text, tool_names=", ".join(names))


def _describe_qwen(tools: list[dict]) -> str:
    return _QWEN_HEADER.format(tool_text="".join("\n" + _dumps(_wrapped(t)) for t in tools))


def _describe_qwen3_5(tools: list[dict]) -> str:
    return _QWEN35_HEADER.format(tool_text="".join("\n" + _dumps(t.get("function", t) if t.get("type") == "function"
                                                                  else t) for t in tools))


def _describe_llama3(tools: list[dict]) -> str:
    text = "".join(_dumps(_wrapped(t), indent=4) + "\n\n" for t in tools)
    return _LLAMA3_HEADER.format(date=today(), tool_text=text)


def _describe_mistral(tools: list[dict]) -> str:
    return "[AVAILABLE_TOOLS] " + _dumps([_wrapped(t) for t in tools]) + "[/AVAILABLE_TOOLS]"


def _describe_glm4(tools: list[dict]) -> str:
    text = ""
    for tool in map(_as_function, tools):
        text += "\n\n## {name}\n\n{body}\n在调用上述函数时，请使用 Json 格式表示调用的参数。".format(
            name=tool["name"], body=_dumps(tool, indent=4))
    return _GLM4_HEADER.format(tool_text=text)


# --- tool calls (name, JSON arguments) -> assistant text ---------------------------------------------------

Call = tuple[str, str]   # (function name, arguments as a JSON string)


def _call_default(calls: list[Call]) -> str:
    return "\n".join(f"Action: {name}\nAction Input: {arguments}" for name, arguments in calls)


def _call_qwen(calls: list[Call]) -> str:
    return "\n".join(f"<tool_call>\n{_dumps({'name': n, 'arguments': json.loads(a)})}\n</tool_call>" for n, a in calls)


def _call_qwen3_5(calls: list[Call]) -> str:
    out = []
    for name, arguments in calls:
        text = f"<tool_call>\n<function={name}>"
        for key, value in json.loads(arguments).items():
            value = value if isinstance(value, str) else _dumps(value)
            text += f"\n<parameter={key}>\n{value}\n</parameter>"
        out.append(text + "\n</function>\n</tool_call>")
    return "\n".join(out)


def _call_llama3(calls: list[Call]) -> str:
    objects = [{"name": n, "parameters": json.loads(a)} for n, a in calls]
    return _dumps(objects[0] if len(objects) == 1 else objects)


def _call_mistral(calls: list[Call]) -> str:
    return _dumps([{"name": n, "arguments": json.loads(a)} for n, a in calls])


def _call_glm4(calls: list[Call]) -> str:
    if len(calls) > 1:
        raise DataError("tool_format glm4: GLM-4 cannot make several tool calls in one turn")
    return f"{calls[0][0]}\n{calls[0][1]}"


@dataclass(frozen=True)
class ToolFormat:
    describe: Callable[[list[dict]], str]   # tool definitions -> text appended to the system prompt
    write_calls: Callable[[list[Call]], str]  # parsed tool calls -> the assistant turn's text


TOOL_FORMATS: dict[str, ToolFormat] = {
    "default": ToolFormat(_describe_default, _call_default),
    "qwen": ToolFormat(_describe_qwen, _call_qwen),
    "qwen3_5": ToolFormat(_describe_qwen3_5, _call_qwen3_5),
    "llama3": ToolFormat(_describe_llama3, _call_llama3),
    "mistral": ToolFormat(_describe_mistral, _call_mistral),
    "glm4": ToolFormat(_describe_glm4, _call_glm4),
}


def describe_tools(tool_format: str, tools: str) -> str:
    """The system-prompt text for a JSON list of tool definitions ("" for an empty list)."""
    try:
        parsed = json.loads(tools)
    except ValueError:
        raise DataError(f"tools: not valid JSON: {tools[:80]!r}") from None
    return TOOL_FORMATS[tool_format].describe(parsed) if len(parsed) else ""


def parse_calls(content: str) -> list[Call]:
    """An assistant tool-call turn: one JSON object {"name", "arguments"} or a list of them."""
    try:
        parsed = json.loads(content)
    except ValueError:
        raise DataError(f"tool call turn is not valid JSON: {content[:80]!r}") from None
    calls = parsed if isinstance(parsed, list) else [parsed]
    try:
        return [(c["name"], _dumps(c["arguments"])) for c in calls]
    except (KeyError, TypeError):
        raise DataError(f"tool call turn must be {{\"name\": ..., \"arguments\": ...}}: {content[:80]!r}") from None


# --- assistant text -> tool calls (what the model wrote, read back: stage grpo's tool episodes) -----------------

ParsedCall = tuple[str, Any]   # (function name, its arguments as parsed: a dict for a well-formed call)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):   # RecursionError: a model's "[[[[..." nested past Python's limit
        return None


def _named(objects: Any, arguments_key: str) -> list[ParsedCall] | None:
    """JSON call objects {"name": ..., arguments_key: ...} (one or a list) -> calls; None if any is not one."""
    items = objects if isinstance(objects, list) else [objects]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or arguments_key not in item:
            return None
        calls.append((item["name"], item[arguments_key]))
    return calls or None


# The readers below take what a policy generated: any text, up to max_completion_length tokens of it (a degenerate
# model repeats `<tool_call>` or spaces thousands of times). Each is a scan in time linear in the text, giving what
# LLaMA-Factory's regular expressions give (tests/test_fuzz_tools.py holds them as the oracle): those search for a
# closing tag after every opening one, or test a lookahead at every character of a whitespace run, and took 40 s to
# minutes on such a turn.
_SPACE = re.compile(r"\s*")
_WORD = re.compile(r"[a-zA-Z0-9_]*")
_KEY = re.compile(r"[^>\n]*")


def _spans(text: str, open_: str, close: str) -> list[str]:
    """re.findall(open_ + "(.+?)" + close, text, re.DOTALL), in linear time."""
    found, at = [], 0
    while (start := text.find(open_, at)) >= 0:
        body = start + len(open_)
        end = text.find(close, body + 1)   # `.+?`: at least one character
        if end < 0:
            break   # no closing tag after this one: none after a later opening either
        found.append(text[body:end])
        at = end + len(close)
    return found


def _tagged(text: str, open_: str, at: int) -> tuple[str | None, int]:
    """`<tag=KEY>` at `at` (`open_` is "<tag="): (KEY, the position after its `>`), KEY one or more characters that
    are not `>` or a newline; else (None, where the search may go on: past the run of such characters, since an
    opening tag inside that run fails at the same place)."""
    key_at = at + len(open_)
    key_end = _KEY.match(text, key_at).end()
    if key_end == key_at or not text.startswith(">", key_end):
        return None, max(at + 1, key_end)
    return text[key_at:key_end], key_end + 1


def _first_function(span: str) -> tuple[str, str] | None:
    """re.search(r"<function=([^>\n]+)>(.*?)</function>", span, re.DOTALL).groups(), in linear time."""
    at = 0
    while (start := span.find("<function=", at)) >= 0:
        name, at = _tagged(span, "<function=", start)
        if name is not None:
            end = span.find("</function>", at)
            return None if end < 0 else (name, span[at:end])
    return None


def _parameters(body: str) -> list[tuple[str, str]]:
    """re.findall(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", body, re.DOTALL), in linear time."""
    found, at = [], 0
    while (start := body.find("<parameter=", at)) >= 0:
        key, at = _tagged(body, "<parameter=", start)
        if key is None:
            continue
        value = at + body.startswith("\n", at)
        close = body.find("</parameter>", value)
        if close < 0:
            break
        end = close - 1 if close - 1 >= value and body[close - 1] == "\n" else close
        found.append((key, body[value:end]))
        at = close + len("</parameter>")
    return found


def _default_calls(text: str) -> list[tuple[str, str]]:
    r"""re.findall(r"Action:\s*([a-zA-Z0-9_]+)\s*Action Input:\s*(.+?)(?=\s*Action:|\s*$)", text, re.DOTALL) (LLaMA-
    Factory's default-format extractor), in linear time."""
    found, at, n = [], 0, len(text)
    while (start := text.find("Action:", at)) >= 0:
        name_at = _SPACE.match(text, start + len("Action:")).end()
        name_end = _WORD.match(text, name_at).end()
        inputs = None
        if name_end > name_at:
            after = _SPACE.match(text, name_end).end()
            if text.startswith("Action Input:", after):   # the whole word, then the label
                inputs = after + len("Action Input:")
            elif name_end - 6 > name_at and text.startswith("Action Input:", name_end - 6):
                name_end, inputs = name_end - 6, name_end + len(" Input:")   # "fooAction Input:": the name is foo
        if inputs is None:
            at = start + 1
            continue
        value = _SPACE.match(text, inputs).end()
        if value == n:   # only whitespace after the label: `.+?` takes its last character
            if value == inputs:
                break
            found.append((text[name_at:name_end], text[value - 1:]))
            break
        target = text.find("Action:", value + 1)
        end = n if target < 0 else target
        while end > value + 1 and text[end - 1].isspace():   # the lookahead's `\s*` before the next Action: or the end
            end -= 1
        found.append((text[name_at:name_end], text[value:end]))
        at = end
    return found


def _read_default(text: str) -> list[ParsedCall] | None:
    calls = []
    for name, arguments in _default_calls(text):
        parsed = _json(arguments.strip().strip('"').strip("```"))
        if parsed is None:
            return None
        calls.append((name, parsed))
    return calls or None


def _read_tagged(text: str) -> list[ParsedCall] | None:
    calls = []
    for span in _spans(text, "<tool_call>", "</tool_call>"):
        one = _named(_json(span.strip()), "arguments")
        if one is None:
            return None
        calls += one
    return calls or None


def _read_qwen3_5(text: str) -> list[ParsedCall] | None:
    calls = []
    for span in _spans(text, "<tool_call>", "</tool_call>"):
        function = _first_function(span)
        if function is None:
            return None
        name, body = function
        arguments = {}
        for key, value in _parameters(body):
            parsed = _json(value)
            arguments[key] = value if parsed is None else parsed
        calls.append((name.strip(), arguments))
    return calls or None


def _read_llama3(text: str) -> list[ParsedCall] | None:
    return _named(_json(text.strip()), "parameters")


def _read_mistral(text: str) -> list[ParsedCall] | None:
    body = text.strip()
    if body.startswith("[TOOL_CALLS]"):
        body = body[len("[TOOL_CALLS]"):]
    return _named(_json(body.strip()), "arguments")


def _read_glm4(text: str) -> list[ParsedCall] | None:
    if "\n" not in text.strip():
        return None
    name, arguments = text.strip().split("\n", maxsplit=1)
    parsed = _json(arguments.strip())
    return [(name.strip(), parsed)] if parsed is not None and name.strip() else None


CALL_READERS = {"default": _read_default, "qwen": _read_tagged, "qwen3_5": _read_qwen3_5, "llama3": _read_llama3,
                "mistral": _read_mistral, "glm4": _read_glm4}


def read_calls(function_format: str, text: str) -> list[ParsedCall] | None:
    """The tool calls an assistant turn makes, read as the template's format writes them (LLaMA-Factory's
    tool_utils extractors: `Action:` / `Action Input:` for default, <tool_call> JSON for qwen, ...), or None when the
    turn is an answer, not a well-formed call."""
    return CALL_READERS[function_format](text)
