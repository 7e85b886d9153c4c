"""Hypothesis against what a GRPO tool episode reads and writes (issue 67, round 5b): the policy's turns read back as
tool calls (data/tools.read_calls: any text a model may write, in bounded time, as LLaMA-Factory's expressions read
it), the user's tools' return values (any object, any text) and their results put back in the episode (never a
control token of their own). Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import re
import time

from fuzzing import fuzz
from hypothesis import example, given
from hypothesis import strategies as st

from steadytune.data.control_text import MARK_END, MARK_START, ClientText
from steadytune.data.templates import encode_parts, get_template
from steadytune.data.tools import CALL_READERS, _default_calls, _first_function, _parameters, _spans, read_calls
from steadytune.model.tiny import build_chat_tokenizer
from steadytune.stages.episodes import Toolbox, encode_result

# LLaMA-Factory's extractors (data/tool_utils.py), the oracle of the linear-time readers
LF_DEFAULT = re.compile(r"Action:\s*([a-zA-Z0-9_]+)\s*Action Input:\s*(.+?)(?=\s*Action:|\s*$)", re.DOTALL)
LF_TAGGED = re.compile(r"<tool_call>(.+?)</tool_call>", re.DOTALL)
LF_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.DOTALL)
LF_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)

PIECES = ["Action:", "Action Input:", "Action", " Input:", " ", "\n", "\t", "\u3000", "a", "foo", "1", "{}", '{"x": 1}',
          "```", '"', ":", ">", "<", "[", "]", "{", "<tool_call>", "</tool_call>", "<function=", "</function>",
          "<parameter=", "</parameter>", "[TOOL_CALLS]", '{"name": "f", "arguments": {}}', '"parameters": {}']
texts = st.lists(st.sampled_from(PIECES), max_size=16).map("".join)
# a degenerate policy: one piece (or two) repeated to the length of a long completion
floods = st.builds(lambda pieces, n, tail: "".join(pieces) * n + tail, st.lists(st.sampled_from(PIECES), min_size=1,
                   max_size=2), st.integers(2_000, 20_000), st.sampled_from(["", "x", "</tool_call>", "\n"]))


@fuzz(400)
@given(texts)
def test_the_call_readers_read_as_llamafactorys_expressions(text):
    assert _default_calls(text) == LF_DEFAULT.findall(text)
    assert _spans(text, "<tool_call>", "</tool_call>") == LF_TAGGED.findall(text)
    found = LF_FUNCTION.search(text)
    assert _first_function(text) == (found.groups() if found else None)
    assert _parameters(text) == LF_PARAMETER.findall(text)


@fuzz(60)
@given(st.one_of(floods, texts), st.sampled_from(sorted(CALL_READERS)))
@example("<tool_call>" * 20_000, "qwen")
@example("<tool_call><function=f>" + "<parameter=a>" * 20_000 + "</function></tool_call>", "qwen3_5")
@example("<tool_call>" + "<function=" * 20_000 + "</tool_call>", "qwen3_5")
@example("Action: a Action Input: x" + " " * 40_000 + "y", "default")
def test_any_turn_reads_as_calls_or_an_answer_in_bounded_time(text, function_format):
    """`<tool_call>` 20,000 times took LF's expression 40 s, `<parameter=a>` as often 61 s, spaces in an
    `Action Input:` seconds, "[[[..." nested past Python's limit a RecursionError: each ended a GRPO run."""
    start = time.process_time()
    calls = read_calls(function_format, text)
    assert time.process_time() - start < 2.0, len(text)   # CPU seconds; the degenerate turns took 40-60 s
    assert calls is None or (calls and all(isinstance(name, str) for name, _ in calls))


@fuzz(40)
@given(st.sampled_from(["[", "{\"a\": ", "[{\"name\": \"f\", \"arguments\": "]), st.integers(1_000, 100_000))
def test_arguments_nested_past_pythons_limit_are_an_answer(opening, depth):
    for function_format, text in (("qwen", f"<tool_call>{opening * depth}</tool_call>"), ("llama3", opening * depth),
                                  ("mistral", opening * depth), ("glm4", "f\n" + opening * depth),
                                  ("default", f"Action: f\nAction Input: {opening * depth}")):
        assert read_calls(function_format, text) is None


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text for you")

    __repr__ = __str__


def circular() -> list:
    loop: list = []
    loop.append(loop)
    return loop


text_with_surrogates = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=20)
json_like = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), text_with_surrogates),
                         lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                 st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                         max_leaves=8)
returned = st.one_of(json_like, st.binary(max_size=8), st.builds(Unprintable), st.builds(circular),
                     st.builds(lambda: {(1, 2): 3}), st.builds(lambda: {1, 2}), st.builds(lambda: (i for i in "ab")),
                     st.builds(lambda: {"nested": Unprintable()}))


@fuzz(150)
@given(returned)
def test_whatever_a_tool_returns_is_text_the_model_reads(value):
    """A tool's return value that JSON cannot write (a cycle, tuple keys, an object whose str raises) ended the run
    in a traceback; text with lone surrogates crashed the tokenizer."""
    box = Toolbox({"tool": lambda: value})
    result, failed = box.call("tool", {}, "step 1")
    assert isinstance(result, str)
    result.encode("utf-8")   # no lone surrogate: the tokenizer takes it
    assert not failed or result.startswith('{"error": "TypeError: returned a ')


TOKENIZER = build_chat_tokenizer()
TEMPLATES = {name: get_template(name, TOKENIZER) for name in ("qwen", "gemma", "llama3", "mistral", "glm4", "default")}
CONTROL = sorted({t.content for t in TOKENIZER.added_tokens_decoder.values() if t.special}, key=len)
results = st.lists(st.one_of(st.sampled_from(CONTROL), st.sampled_from([MARK_START, MARK_END, "\n", " ", "7"]),
                             st.text(alphabet="abc <>|/_", max_size=6)), max_size=10).map("".join)


@fuzz(150)
@given(results, st.sampled_from(sorted(TEMPLATES)))
def test_a_tool_result_never_writes_a_control_token(content, name):
    """The episode around a result holds the template's control tokens and no other, whatever the result says; a
    result without a control-token string is encoded exactly as before (data/templates.encode_parts)."""
    template = TEMPLATES[name]
    after = template.after_call_parts()
    box = Toolbox({})
    special = set(TOKENIZER.all_special_ids)

    def controls(ids: list[int]) -> list[int]:
        return [i for i in ids if i in special]

    ids = encode_result(ClientText(TOKENIZER, template), template, after, content, box, "step 1")
    assert controls(ids) == controls(encode_result(ClientText(TOKENIZER, template), template, after, "", box, "x"))
    if not any(token in content for token in CONTROL + [MARK_START, MARK_END]):
        assert ids == encode_parts(TOKENIZER, after + template.tool_result_parts(content))
