"""Chat templates: how a conversation becomes token ids, turn by turn, exactly as LLaMA-Factory builds them.

A template is a set of *slots* per role (user, assistant, system, tool call, tool result, prefix). A slot is a
sequence of elements: text with a `{{content}}` placeholder, or a marker for the tokenizer's bos / eos token.
Every message becomes the elements of its slot; each text element is tokenised on its own and marker elements
become their token id, so the ids (and where the prompt ends and the answer starts) are the same as
LLaMA-Factory's. That is a tested fact: `tests/golden/templates/` holds ids LLaMA-Factory itself produced for
every template name here (`tools/make_template_golden.py`), and `tests/test_template_golden.py` checks ours
against them, masks included.

The templates' slot strings are the model families' chat formats (facts); the names and semantics follow
LLaMA-Factory's `data/template.py` so a `template:` key means the same thing in both tools. Three behaviours
beyond plain slots, also as there:
- `fuse_system` (Llama-2, Gemma, Mistral): no system role; the system text opens the first user turn;
- `reasoning` (qwen3, qwen3_5, qwen3_vl): an answer without a think block gets an empty one
  (`<think>\\n\\n</think>\\n\\n`), trained when `enable_thinking` is true (the default), prompt-side otherwise;
- `efficient_eos` (GLM-4): answers carry no end token; the eos id is the label of the next turn's first token
  and ends the sequence.
`template: auto` derives slots from the tokenizer's own chat template the way LLaMA-Factory does when `template`
is unset.
"""

from __future__ import annotations

import difflib
import json
import re
from copy import deepcopy
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Optional, Union

from steadytune.config import ConfigError, show_value
from steadytune.data.tools import TOOL_FORMATS, describe_tools, parse_calls

# Roles of a normalised conversation (see formats.py).
USER, ASSISTANT, SYSTEM, FUNCTION, OBSERVATION = "user", "assistant", "system", "function_call", "observation"
ASSISTANT_SIDE = (ASSISTANT, FUNCTION)   # trained turns
USER_SIDE = (USER, OBSERVATION)          # prompt turns

CONTENT = "{{content}}"
# Marker tokens inside slot text: <|im_start|>, <start_of_turn>, </think>, <｜User｜> (not the {{content}} slot).
_MARKER = re.compile(r"<\|[^<>|\s]+\|>|(?<!<)</?[a-z_]+>(?!>)|<｜[^<>｜\s]+｜>")
_SENTINEL = "\u0000STEADYTUNE_TEXT\u0000"


class _Special:
    """A slot element standing for one of the tokenizer's special tokens (bos or eos), whatever its text."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name.upper()


BOS, EOS = _Special("bos"), _Special("eos")
Element = Union[str, _Special]
Slot = tuple   # of Element
Part = Union[str, int]   # an element resolved for one tokenizer: text to tokenise, or a token id


def tokenizer_adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer starts every text it encodes with its bos token (Gemma, Llama; Qwen has none)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        return tokenizer.encode("a")[:1] == [bos]
    except Exception:   # a tokenizer that cannot encode alone: treat as adding nothing
        return False


@dataclass(frozen=True)
class Piece:
    """One message as rendered: its text (for display), whether it is trained, and the parts that are tokenised
    one by one (text, or a token id for bos/eos)."""
    text: str
    trainable: bool
    parts: tuple = ()


@dataclass
class Template:
    """A chat format. Build one with `get_template(name, tokenizer)`; the fields mirror LLaMA-Factory's."""

    name: str
    user: Slot = (CONTENT,)
    assistant: Optional[Slot] = None          # default: content + eos (content alone with efficient_eos)
    system: Slot = (CONTENT,)
    function: Optional[Slot] = None           # assistant tool calls; default: the assistant slot
    observation: Optional[Slot] = None        # tool results; default: the user slot
    prefix: Slot = ()
    tool_format: str = "default"              # how tool definitions are described (tools.py)
    function_format: Optional[str] = None     # how tool calls are written (default: tool_format's writer "default")
    default_system: str = ""
    stop_words: tuple = ()
    efficient_eos: bool = False
    replace_eos: bool = False                 # the first stop word takes the eos role
    fuse_system: bool = False
    reasoning: bool = False
    thought_words: tuple = ("<think>\n", "\n</think>\n\n")
    tool_call_words: tuple = ("<tool_call>", "</tool_call>")
    enable_thinking: Optional[bool] = True
    preserve_thinking: bool = False
    # The prefix is what the tokenizer itself puts before a text it encodes (Gemma, Llama: bos; Qwen: nothing), as
    # `tokenizer(prompt)` in a plain transformers script: for templates that add no format of their own.
    tokenizer_prefix: bool = False
    tokenizer: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.assistant is None:
            self.assistant = (CONTENT,) if self.efficient_eos else (CONTENT, EOS)
        if self.function is None:
            self.function = self.assistant
        if self.observation is None:
            self.observation = self.user
        if self.function_format is None:
            self.function_format = "default"
        if self.tokenizer_prefix and self.tokenizer is not None:
            self.prefix = (BOS,) if tokenizer_adds_bos(self.tokenizer) else ()

    # --- the tokens the template's markers stand for --------------------------------------------------------

    @property
    def eos_token(self) -> str | None:
        """The eos text this template ends answers with: the first stop word when it replaces eos."""
        if self.replace_eos and self.stop_words:
            return self.stop_words[0]
        return getattr(self.tokenizer, "eos_token", None)

    @property
    def eos_token_id(self) -> int | None:
        token = self.eos_token
        if token is None:
            return None
        if self.replace_eos:
            return self.tokenizer.convert_tokens_to_ids(token)
        return self.tokenizer.eos_token_id

    @property
    def stop(self) -> str:
        """The text that ends an answer (the first stop word, else eos; "" when the template ends answers with
        nothing, like `empty`)."""
        if self.stop_words:
            return self.stop_words[0]
        return self.eos_token or "" if EOS in self.assistant or self.efficient_eos else ""

    def stop_token_ids(self) -> list[int]:
        """Token ids that end generation: eos and every stop word (LLaMA-Factory's get_stop_token_ids)."""
        ids = {self.eos_token_id} | {self.tokenizer.convert_tokens_to_ids(w) for w in self.stop_words}
        return sorted(i for i in ids if i is not None)

    def special_tokens(self) -> list[str]:
        """Tokens the template relies on being single vocabulary entries: its stop words and the marker tokens
        (<|im_start|>, <start_of_turn>, ...) of the slots every conversation uses."""
        found = [m for slot in (self.prefix, self.system, self.user, self.assistant) for element in slot
                 if isinstance(element, str) for m in _MARKER.findall(element)]
        return list(dict.fromkeys(list(self.stop_words) + found))

    # --- messages -> parts ----------------------------------------------------------------------------------

    def _resolve(self, slot: Slot, content: str | None = None) -> list[Part]:
        parts: list[Part] = []
        for element in slot:
            if isinstance(element, str):
                parts.append(element.replace(CONTENT, content, 1) if content is not None else element)
            elif element is BOS:
                if self.tokenizer.bos_token_id is not None:
                    parts.append(self.tokenizer.bos_token_id)
            elif element is EOS:
                if self.eos_token_id is not None:
                    parts.append(self.eos_token_id)
        return parts

    def _tool_call_text(self, content: str) -> str:
        """A tool-call turn's JSON written in the template's format; a think block or text around a
        <tool_call>...</tool_call> span stays in front of it."""
        writer = TOOL_FORMATS[self.function_format].write_calls
        if self.fuse_system:  # LLaMA-Factory's fused-system templates parse the whole turn as JSON
            return writer(parse_calls(content))
        open_, close = self.tool_call_words
        match = re.search(rf"{re.escape(open_)}(.*?){re.escape(close)}", content, re.DOTALL)
        if match:
            return content.replace(match.group(0), "") + writer(parse_calls(match.group(1)))
        start, end = self.thought_words
        thought = re.search(rf"{re.escape(start)}(.*?){re.escape(end)}", content, re.DOTALL)
        if thought:
            return thought.group(0) + writer(parse_calls(content.replace(thought.group(0), "")))
        return writer(parse_calls(content))

    def _message_parts(self, index: int, message: dict, system: str, tools: str | None) -> list[Part]:
        parts: list[Part] = []
        fused = ""
        if index == 0:
            parts += self._resolve(self.prefix)
            if system or tools:
                tool_text = describe_tools(self.tool_format, tools) if tools else ""
                if self.fuse_system:
                    first = self._resolve(self.system, system + tool_text)[0]
                    fused = first if isinstance(first, str) else ""
                else:
                    parts += self._resolve(self.system, system + tool_text)
        role, content = message["role"], message["content"]
        if role == USER:
            parts += self._resolve(self.user, fused + content)
        elif role == ASSISTANT:
            parts += self._resolve(self.assistant, content)
        elif role == OBSERVATION:
            parts += self._resolve(self.observation, content)
        elif role == FUNCTION:
            parts += self._resolve(self.function, self._tool_call_text(content))
        else:
            raise ValueError(f"unexpected role {role!r}")
        return parts

    def _remove_thought(self, content: str) -> str:
        start, end = self.thought_words
        return re.sub(rf"{re.escape(start)}(.*?){re.escape(end)}", "", content, flags=re.DOTALL).lstrip("\n")

    def _has_thought(self, content: str) -> bool:
        return self.thought_words[0].strip() in content or self.thought_words[1].strip() in content

    def message_parts(self, messages: list[dict], system: str | None = None, tools: str | None = None,
                      mask_history: bool = False, enable_thinking: Optional[bool] = None) -> list[list[Part]]:
        """The parts of every message, in order (user side, answer, user side, answer, ...). `enable_thinking`
        overrides the template's for this call."""
        thinking = self.enable_thinking if enable_thinking is None else enable_thinking
        system = system or self.default_system
        messages = deepcopy(messages)
        drop_history_thoughts = False
        if self.reasoning:
            if thinking is False:
                for m in messages[1::2]:
                    m["content"] = self._remove_thought(m["content"])
            drop_history_thoughts = mask_history and not self.preserve_thinking
            if drop_history_thoughts:
                for m in messages[1:-2:2]:
                    m["content"] = self._remove_thought(m["content"])
        per_message = [self._message_parts(i, m, system, tools) for i, m in enumerate(messages)]
        if self.reasoning:
            empty_thought = self.thought_words[0] + self.thought_words[1]
            answers = [len(messages) - 2] if drop_history_thoughts else range(0, len(messages), 2)
            for i in answers:
                if not self._has_thought(messages[i + 1]["content"]):
                    if thinking:
                        per_message[i + 1] = [empty_thought] + per_message[i + 1]
                    else:
                        per_message[i] = per_message[i] + [empty_thought]
        return per_message

    def encode_pairs(self, tokenizer: Any, messages: list[dict], system: str | None = None,
                     tools: str | None = None, mask_history: bool = False) -> list[tuple[list[int], list[int]]]:
        """(prompt ids, answer ids) for every exchange of the conversation."""
        encoded = [encode_parts(tokenizer, p) for p in self.message_parts(messages, system, tools, mask_history)]
        return [(encoded[i], encoded[i + 1]) for i in range(0, len(encoded), 2)]

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None) -> list["Piece"]:
        """The conversation as pieces, one per message: prompt-side pieces are masked, answers trained."""
        return [Piece(self._text(parts), messages[i]["role"] in ASSISTANT_SIDE, tuple(parts))
                for i, parts in enumerate(self.message_parts(messages, system, tools))]

    def _text(self, parts: list[Part]) -> str:
        return "".join(p if isinstance(p, str) else self.tokenizer.convert_ids_to_tokens(p) for p in parts)

    # --- one-turn prompts (classification, generation) --------------------------------------------------------

    def prompt_parts(self, user_text: str, system: str | None = None) -> list[Part]:
        """Everything before the answer of a one-turn exchange. A reasoning template's empty think block is put
        here (prompt side) so every label is scored after the same prefix."""
        turn = [{"role": USER, "content": user_text}, {"role": ASSISTANT, "content": ""}]
        return self.message_parts(turn, system, enable_thinking=False)[0]

    def answer_parts(self, answer: str) -> list[Part]:
        """The trained side of a one-turn answer: the assistant slot (plus eos with efficient_eos)."""
        parts = self._resolve(self.assistant, answer)
        if self.efficient_eos and self.eos_token_id is not None:
            parts.append(self.eos_token_id)
        return parts

    def generation_prompt_parts(self, messages: list[dict], system: str | None = None,
                                tools: str | None = None) -> list[Part]:
        """A conversation ending on the user's side, up to where the next answer starts, as LLaMA-Factory's chat
        engine encodes it (the messages plus an empty answer, one-turn: earlier think blocks dropped; a reasoning
        template's empty think block stays with the answer, the model writes its own, unless enable_thinking is
        false)."""
        parts = self.message_parts(messages + [{"role": ASSISTANT, "content": ""}], system, tools, mask_history=True)
        return [part for message in parts[:-1] for part in message]

    def tool_result_parts(self, content: str) -> list[Part]:
        """A tool result (LLaMA-Factory's observation turn) as it follows an assistant's tool call: the observation
        slot, which ends where the assistant's next turn starts (Qwen: its tool_response user turn, then
        "<|im_start|>assistant\\n")."""
        return self._resolve(self.observation, content)

    def after_call_parts(self) -> list[Part]:
        """What the function slot writes after the stop token that ends an assistant's tool-call turn (Qwen: the
        "\\n" after <|im_end|>; nothing where the stop token is the slot's end): a model stops at its stop token, and
        the conversation goes on from there."""
        stop_ids = set(self.stop_token_ids())
        stop_texts = [w for w in (*self.stop_words, self.eos_token or "") if w]
        sentinel = "\x00"
        parts = self._resolve(self.function, sentinel)
        for i, part in enumerate(parts):
            if isinstance(part, int):
                if part in stop_ids:
                    return parts[i + 1:]
                continue
            start = part.find(sentinel) + 1 if sentinel in part else 0
            found = [(part.find(w, start), w) for w in stop_texts if part.find(w, start) >= 0]
            if found:
                at, word = min(found)
                rest = part[at + len(word):]
                return ([rest] if rest else []) + parts[i + 1:]
        return []

    def render_generation_prompt(self, messages: list[dict], system: str | None = None,
                                 tools: str | None = None) -> str:
        """generation_prompt_parts as text (what `serve` feeds the model for a chat request)."""
        return self._text(self.generation_prompt_parts(messages, system, tools))

    def render_prompt(self, user_text: str, system: str | None = None) -> str:
        return self._text(self.prompt_parts(user_text, system))

    def answer_target(self, answer: str) -> str:
        return self._text(self.answer_parts(answer))


def encode_parts(tokenizer: Any, parts: list[Part]) -> list[int]:
    """Each text part tokenised on its own (no special tokens added), ids kept: LLaMA-Factory's element rule."""
    ids: list[int] = []
    for part in parts:
        if isinstance(part, int):
            ids.append(part)
        elif len(part) >= LONG_PART:
            ids += _encode_long(tokenizer, len(tokenizer), part)
        elif part:
            ids += tokenizer.encode(part, add_special_tokens=False)
    return ids


# A part this long is most likely the same in every row (a long default_system: 100,000 characters took 75 ms a row
# to tokenise, 75 s for 1,000 rows): tokenised once and reused.
LONG_PART = 2048


@lru_cache(maxsize=8)
def _encode_long(tokenizer: Any, vocabulary: int, part: str) -> tuple[int, ...]:
    """`vocabulary` (len(tokenizer)) is in the key: a token added later gives a new entry."""
    return tuple(tokenizer.encode(part, add_special_tokens=False))


# ---------------------------------------------------------------------------------------------------------
# The registry: name -> Template fields. Slot strings are the families' published chat formats.
# ---------------------------------------------------------------------------------------------------------

_IM_USER = "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n"
_IM_ASSISTANT = "{{content}}<|im_end|>\n"
_IM_SYSTEM = "<|im_start|>system\n{{content}}<|im_end|>\n"
_QWEN_TOOL_RESULT = "<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
_QWEN = dict(user=(_IM_USER,), assistant=(_IM_ASSISTANT,), system=(_IM_SYSTEM,), function=(_IM_ASSISTANT,),
             observation=(_QWEN_TOOL_RESULT,), tool_format="qwen", function_format="qwen",
             stop_words=("<|im_end|>",), replace_eos=True)
_QWEN35 = dict(_QWEN, tool_format="qwen3_5", function_format="qwen3_5")
_GEMMA = dict(user=("<start_of_turn>user\n{{content}}<end_of_turn>\n<start_of_turn>model\n",),
              assistant=("{{content}}<end_of_turn>\n",), system=("{{content}}\n\n",),
              observation=("<start_of_turn>tool\n{{content}}<end_of_turn>\n<start_of_turn>model\n",),
              prefix=(BOS,), stop_words=("<end_of_turn>",), replace_eos=True, fuse_system=True)
_LLAMA3_TURN = "<|start_header_id|>{role}<|end_header_id|>\n\n"

TEMPLATES: dict[str, dict] = {
    "empty": dict(assistant=(CONTENT,)),
    # steadytune's own (LLaMA-Factory has no such name): the text as a plain transformers + peft script encodes it,
    # `tokenizer(prompt)` then answer + eos: so the bos the tokenizer adds (Gemma, Llama) opens the prompt, which
    # LF's `empty` leaves out, and the model learns to stop after its answer (a label word, say). The demo uses it.
    "empty_eos": dict(assistant=(CONTENT, EOS), tokenizer_prefix=True),
    "default": dict(user=("Human: {{content}}", EOS, "\nAssistant:"), assistant=(CONTENT, EOS, "\n"),
                    system=("System: {{content}}", EOS, "\n")),
    "alpaca": dict(user=("### Instruction:\n{{content}}\n\n### Response:\n",), assistant=(CONTENT, EOS, "\n\n"),
                   default_system="Below is an instruction that describes a task. Write a response that "
                                  "appropriately completes the request.\n\n"),
    "vicuna": dict(user=("USER: {{content}} ASSISTANT:",),
                   default_system="A chat between a curious user and an artificial intelligence assistant. The "
                                  "assistant gives helpful, detailed, and polite answers to the user's questions."),
    # LLaVA-1.5: vicuna's format (LLaMA-Factory's `llava`, whose mm_plugin expands <image>: data/multimodal/).
    "llava": dict(user=("USER: {{content}} ASSISTANT:",),
                  default_system="A chat between a curious user and an artificial intelligence assistant. The "
                                 "assistant gives helpful, detailed, and polite answers to the user's questions."),
    "chatml": dict(user=(_IM_USER,), assistant=(_IM_ASSISTANT,), system=(_IM_SYSTEM,),
                   observation=("<|im_start|>tool\n{{content}}<|im_end|>\n<|im_start|>assistant\n",),
                   stop_words=("<|im_end|>", "<|im_start|>"), replace_eos=True),
    "qwen": dict(_QWEN, default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    "qwen3": dict(_QWEN, reasoning=True),
    "qwen3_nothink": dict(_QWEN),
    "qwen2_vl": dict(_QWEN, default_system="You are a helpful assistant."),
    "qwen3_vl": dict(_QWEN, reasoning=True),
    "qwen3_vl_nothink": dict(_QWEN),
    "qwen3_5": dict(_QWEN35, reasoning=True),
    "qwen3_5_nothink": dict(_QWEN35),
    "qwen3_6": dict(_QWEN35, reasoning=True),
    "yi": dict(user=(_IM_USER,), assistant=(_IM_ASSISTANT,), system=(_IM_SYSTEM,), stop_words=("<|im_end|>",)),
    "intern2": dict(user=(_IM_USER,), assistant=(_IM_ASSISTANT,), system=(_IM_SYSTEM,), prefix=(BOS,),
                    stop_words=("<|im_end|>",),
                    default_system="You are an AI assistant whose name is InternLM (书生·浦语).\n"
                                   "- InternLM (书生·浦语) is a conversational language model that is developed by "
                                   "Shanghai AI Laboratory (上海人工智能实验室). It is designed to be helpful, honest, "
                                   "and harmless.\n- InternLM (书生·浦语) can understand and communicate fluently in "
                                   "the language chosen by the user such as English and 中文."),
    "phi4": dict(user=("<|im_start|>user<|im_sep|>{{content}}<|im_end|><|im_start|>assistant<|im_sep|>",),
                 assistant=("{{content}}<|im_end|>",), system=("<|im_start|>system<|im_sep|>{{content}}<|im_end|>",),
                 stop_words=("<|im_end|>",), replace_eos=True),
    "gemma": dict(_GEMMA),
    "gemma3": dict(_GEMMA),
    "llama2": dict(user=(BOS, "[INST] {{content}} [/INST]"), system=("<<SYS>>\n{{content}}\n<</SYS>>\n\n",),
                   fuse_system=True),
    "llama3": dict(user=(_LLAMA3_TURN.format(role="user") + "{{content}}<|eot_id|>" + _LLAMA3_TURN.format(role="assistant"),),
                   assistant=("{{content}}<|eot_id|>",),
                   system=(_LLAMA3_TURN.format(role="system") + "{{content}}<|eot_id|>",),
                   function=("{{content}}<|eot_id|>",),
                   observation=(_LLAMA3_TURN.format(role="ipython") + "{{content}}<|eot_id|>"
                                + _LLAMA3_TURN.format(role="assistant"),),
                   prefix=(BOS,), tool_format="llama3", function_format="llama3",
                   stop_words=("<|eot_id|>", "<|eom_id|>"), replace_eos=True),
    "mistral": dict(user=("[INST] {{content}}[/INST]",), assistant=(" {{content}}", EOS), system=("{{content}}\n\n",),
                    function=("[TOOL_CALLS] {{content}}", EOS),
                    observation=('[TOOL_RESULTS] {"content": {{content}}}[/TOOL_RESULTS]',),
                    prefix=(BOS,), tool_format="mistral", function_format="mistral", fuse_system=True),
    "deepseek": dict(user=("User: {{content}}\n\nAssistant:",), system=("{{content}}\n\n",), prefix=(BOS,)),
    "deepseek3": dict(user=("<｜User｜>{{content}}<｜Assistant｜>",), prefix=(BOS,)),
    "glm4": dict(user=("<|user|>\n{{content}}<|assistant|>",), assistant=("\n{{content}}",),
                 system=("<|system|>\n{{content}}",), function=(CONTENT,),
                 observation=("<|observation|>\n{{content}}<|assistant|>",), prefix=("[gMASK]<sop>",),
                 tool_format="glm4", function_format="glm4", stop_words=("<|user|>", "<|observation|>"),
                 efficient_eos=True),
}
TEMPLATE_NAMES = ("auto",) + tuple(TEMPLATES)
OWN_TEMPLATES = frozenset({"empty_eos"})   # names LLaMA-Factory does not have (no golden ids from it)


def get_template(name: str, tokenizer: Any, tool_format: str | None = None, default_system: str | None = None,
                 enable_thinking: bool | None = True, preserve_thinking: bool = False) -> Template:
    """Template by name for this tokenizer. `auto`: derived from the tokenizer's chat template, else `empty`.
    tool_format / default_system / enable_thinking / preserve_thinking are LLaMA-Factory's data keys."""
    if name == "auto":
        template = _from_chat_template(tokenizer) if isinstance(getattr(tokenizer, "chat_template", None), str) \
            else Template(name="empty", tokenizer=tokenizer, **TEMPLATES["empty"])
    elif name in TEMPLATES:
        template = Template(name=name, tokenizer=tokenizer, **TEMPLATES[name])
    else:
        close = difflib.get_close_matches(name, TEMPLATE_NAMES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"template: unknown template {show_value(name)}{hint}; choose one of {', '.join(TEMPLATE_NAMES)}")
    if tool_format is not None:
        if tool_format not in TOOL_FORMATS:
            raise ConfigError(f"tool_format: unknown tool format {show_value(tool_format)}; choose one of {', '.join(TOOL_FORMATS)}")
        # As LLaMA-Factory: tool calls become plain answers written in that format.
        template = replace(template, function=(CONTENT,) if template.efficient_eos else (CONTENT, EOS),
                           tool_format=tool_format, function_format=tool_format)
    if default_system is not None:
        template = replace(template, default_system=default_system)
    if template.reasoning:
        template = replace(template, enable_thinking=enable_thinking, preserve_thinking=preserve_thinking)
    return template


def _from_chat_template(tokenizer: Any) -> Template:
    """LLaMA-Factory's parse_template: render probe conversations with the tokenizer's Jinja chat template and
    read the slots off the differences."""
    def chat(messages: list[dict], generation_prompt: bool) -> str:
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
        except Exception as e:  # a chat template that cannot render a plain exchange cannot be used
            raise ConfigError(f"template: auto: the tokenizer's chat_template failed to render ({e}); "
                              f"set template: to a named one") from None

    prefix = tokenizer.decode(tokenizer.encode(""))
    system_slot = chat([{"role": "system", "content": CONTENT}], False)[len(prefix):]
    user_empty_system = chat([{"role": "system", "content": ""}, {"role": "user", "content": CONTENT}],
                             True)[len(prefix):]
    user_slot = chat([{"role": "user", "content": CONTENT}], True)[len(prefix):]
    assistant_slot = chat([{"role": "user", "content": CONTENT}, {"role": "assistant", "content": CONTENT}],
                          False)[len(prefix) + len(user_slot):]
    reasoning = "<think>" in assistant_slot
    assistant_slot = assistant_slot.replace("<think>", "").replace("</think>", "").lstrip("\n")
    default_system = ""
    if len(user_slot) > len(user_empty_system):
        # The template injects a default system prompt when none is given: the extra characters are it.
        default_system = _extra_characters(user_empty_system, user_slot)
        user_slot = user_slot[len(system_slot.replace(CONTENT, default_system, 1)):]
    return Template(name="auto", user=(user_slot,), assistant=(assistant_slot,), system=(system_slot,),
                    function=(assistant_slot,), observation=(user_slot,), prefix=(prefix,) if prefix else (),
                    default_system=default_system, reasoning=reasoning, tokenizer=tokenizer)


def _extra_characters(short: str, long: str) -> str:
    """The characters of `long` skipped while walking both strings in step (LLaMA-Factory's find_diff)."""
    i = j = 0
    extra = []
    while i < len(short) and j < len(long):
        if short[i] == long[j]:
            i += 1
        else:
            extra.append(long[j])
        j += 1
    return "".join(extra)


def missing_special_tokens(template: Template, tokenizer: Any) -> list[str]:
    """Template tokens the tokenizer would split into pieces (a template made for another model family)."""
    vocab = tokenizer.get_vocab()
    return [t for t in template.special_tokens() if t not in vocab]


def split_prompt(template: Template, prompt_template: str, system: str | None = None) -> tuple[list[Part], list[Part]]:
    """The parts of a classification row's rendered prompt, cut at `{text}`: (parts before it, parts after it)."""
    parts = template.prompt_parts(prompt_template.replace("{text}", _SENTINEL), system)
    for k, part in enumerate(parts):
        if isinstance(part, str) and _SENTINEL in part:
            before, _, after = part.partition(_SENTINEL)
            return parts[:k] + [before], [after] + parts[k + 1:]
    raise ConfigError(f"template {template.name}: the prompt lost its {{text}} placeholder")


def tools_json(value: Any) -> str | None:
    """Tool definitions as LLaMA-Factory passes them to a template: a JSON string, or None when absent."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__ = ["Template", "Piece", "get_template", "TEMPLATE_NAMES", "TEMPLATES", "missing_special_tokens",
           "split_prompt", "encode_parts", "BOS", "EOS"]
