"""Chat templates: how a conversation becomes text, split into pieces that are trained or masked.

A template renders a conversation as a list of `Piece`s: the text of the prompt side (system, user turns,
tool results, the assistant header) is one piece and is masked; each assistant turn is another piece and is
trained. Pieces are tokenised one by one and concatenated, so the mask boundary is exact (no token straddles a
prompt/answer border) and the prompt ids of a classification row are the same at training and at evaluation.

Two kinds:
- `SlotTemplate`: our own string formats for the common chat families (qwen, gemma, llama3, ...).
- `JinjaTemplate` (`template: auto`): the tokenizer's own `chat_template`, rendered prefix by prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from steadytune.config import ConfigError

# Roles of a normalised conversation (see formats.py).
USER, ASSISTANT, SYSTEM, FUNCTION, OBSERVATION = "user", "assistant", "system", "function_call", "observation"
ASSISTANT_SIDE = (ASSISTANT, FUNCTION)   # trained turns
USER_SIDE = (USER, OBSERVATION)          # prompt turns

_SENTINEL = "\u0000STEADYTUNE_TEXT\u0000"


@dataclass(frozen=True)
class Piece:
    text: str
    trainable: bool


def _join(pieces: list[Piece]) -> list[Piece]:
    """Merge neighbouring pieces with the same flag, dropping empty ones."""
    out: list[Piece] = []
    for p in pieces:
        if not p.text:
            continue
        if out and out[-1].trainable == p.trainable:
            out[-1] = Piece(out[-1].text + p.text, p.trainable)
        else:
            out.append(p)
    return out


class Template:
    """Base interface. `name`, `stop` (the end-of-answer text) and `render` are what the data code uses."""

    name: str
    stop: str

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None) -> list[Piece]:
        raise NotImplementedError

    def render_prompt(self, user_text: str, system: str | None = None) -> str:
        """The whole prompt side of a one-turn exchange, up to where the answer starts."""
        return self.render_generation_prompt([{"role": USER, "content": user_text}], system)

    def render_generation_prompt(self, messages: list[dict], system: str | None = None) -> str:
        """A conversation that ends on the user's side, up to where the next answer starts (what `serve` feeds
        the model for a chat request)."""
        raise NotImplementedError

    def answer_target(self, answer: str) -> str:
        """The trained text of a one-turn answer: the answer followed by the end token."""
        return answer + self.stop

    def special_tokens(self) -> list[str]:
        return []


@dataclass
class SlotTemplate(Template):
    """A chat format written as slots: `{content}` is replaced by the turn's text."""

    name: str
    user: str                         # ends with the assistant header: the answer follows it
    assistant: str                    # "{content}" + end-of-turn (+ separator)
    stop: str                         # end-of-answer text; the classification target ends with it
    system: str = "{content}"
    prefix: str = ""                  # once, at the very start (e.g. the bos token)
    observation: str | None = None    # tool result turn; defaults to `user`
    function: str | None = None       # assistant tool call; defaults to `assistant`
    default_system: str | None = None
    system_in_first_user: bool = False  # gemma has no system role: the system text opens the first user turn
    think_in_prompt: str = ""         # qwen3_nothink: an empty think block right after the assistant header
    think_in_answer: str = ""         # qwen3: an empty think block opens answers that carry none
    specials: tuple[str, ...] = field(default_factory=tuple)

    def special_tokens(self) -> list[str]:
        return list(self.specials)

    def _system_text(self, system: str | None, tools: str | None) -> str:
        text = system if system is not None else (self.default_system or "")
        if tools:
            text = (text + "\n\n" if text else "") + describe_tools(tools)
        return text

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None) -> list[Piece]:
        sys_text = self._system_text(system, tools)
        pieces = [Piece(self.prefix, False)]
        if sys_text and not self.system_in_first_user:
            pieces.append(Piece(self.system.replace("{content}", sys_text), False))
        pending_system = sys_text if self.system_in_first_user else ""
        for msg in messages:
            role, content = msg["role"], msg["content"]
            if role in USER_SIDE:
                if pending_system:
                    content = self.system.replace("{content}", pending_system) + content
                    pending_system = ""
                slot = self.user if role == USER else (self.observation or self.user)
                pieces.append(Piece(slot.replace("{content}", content) + self.think_in_prompt, False))
            else:
                if self.think_in_answer and "<think>" not in content:
                    content = self.think_in_answer + content
                slot = self.assistant if role == ASSISTANT else (self.function or self.assistant)
                pieces.append(Piece(slot.replace("{content}", content), True))
        return _join(pieces)

    def render_generation_prompt(self, messages: list[dict], system: str | None = None) -> str:
        # qwen3: a classification answer is the label alone, so the empty think block goes on the prompt side.
        return "".join(p.text for p in self.render(messages, system)) + self.think_in_answer


class JinjaTemplate(Template):
    """`template: auto`: the tokenizer's chat_template, rendered prefix by prefix to find each turn's span."""

    def __init__(self, tokenizer: Any):
        self.name = "auto"
        self.tokenizer = tokenizer
        self.stop = self._find_stop()

    def _chat(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    @staticmethod
    def _as_chat(messages: list[dict], system: str | None, tools: str | None) -> list[dict]:
        chat = []
        sys_text = system or ""
        if tools:
            sys_text = (sys_text + "\n\n" if sys_text else "") + describe_tools(tools)
        if sys_text:
            chat.append({"role": "system", "content": sys_text})
        for m in messages:
            role = {FUNCTION: ASSISTANT, OBSERVATION: USER}.get(m["role"], m["role"])
            chat.append({"role": role, "content": m["content"]})
        return chat

    def _find_stop(self) -> str:
        """What the chat template writes right after an answer, up to the first line break (e.g. <end_of_turn>)."""
        probe = "STEADYTUNE_PROBE_ANSWER"
        try:
            full = self._chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": probe}], False)
        except Exception as e:  # a template that cannot render a plain exchange is unusable
            raise ConfigError(f"template: auto: the tokenizer's chat_template failed to render ({e})") from None
        tail = full[full.index(probe) + len(probe):]
        stop = tail.split("\n")[0]
        return stop or (self.tokenizer.eos_token or "")

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None) -> list[Piece]:
        chat = self._as_chat(messages, system, tools)
        pieces: list[Piece] = []
        done = ""
        for i, m in enumerate(chat):
            if m["role"] != ASSISTANT:
                continue
            prompt = self._chat(chat[:i], True)
            full = self._chat(chat[: i + 1], False)
            if not prompt.startswith(done) or not full.startswith(prompt):
                raise ConfigError("template: auto: the tokenizer's chat_template rewrites earlier turns "
                                  "(e.g. drops old think blocks), so turns cannot be masked; set template: to a named one")
            pieces += [Piece(prompt[len(done):], False), Piece(full[len(prompt):], True)]
            done = full
        return _join(pieces)

    def render_generation_prompt(self, messages: list[dict], system: str | None = None) -> str:
        return self._chat(self._as_chat(messages, system, None), True)


def describe_tools(tools: str) -> str:
    """Tool definitions (a JSON string in sharegpt/openai data) as system-prompt text."""
    try:
        parsed = json.loads(tools) if isinstance(tools, str) else tools
        body = json.dumps(parsed, ensure_ascii=False, indent=2)
    except (TypeError, ValueError):
        body = str(tools)
    return "You can call these tools. To call one, answer with a JSON object {\"name\": ..., \"arguments\": ...}.\n" + body


_CHATML = dict(
    user="<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n",
    assistant="{content}<|im_end|>\n",
    system="<|im_start|>system\n{content}<|im_end|>\n",
    observation="<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    function="<tool_call>\n{content}\n</tool_call><|im_end|>\n",
    stop="<|im_end|>",
    specials=("<|im_start|>", "<|im_end|>"),
)
_GEMMA = dict(
    prefix="{bos}",
    user="<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n",
    assistant="{content}<end_of_turn>\n",
    system="{content}\n\n",
    system_in_first_user=True,
    stop="<end_of_turn>",
    specials=("<start_of_turn>", "<end_of_turn>"),
)
_EMPTY_THINK = "<think>\n\n</think>\n\n"

# name -> keyword arguments of SlotTemplate. `{bos}` / `{eos}` are filled from the tokenizer; `{auto_bos}` is the
# bos token only for tokenizers that add it to plain text themselves (Gemma, Llama): those models expect it.
TEMPLATES: dict[str, dict] = {
    "empty": dict(prefix="{auto_bos}", user="{content}", assistant="{content}{eos}", stop="{eos}"),
    "default": dict(prefix="{auto_bos}", user="Human: {content}\nAssistant: ", assistant="{content}{eos}\n",
                    system="System: {content}\n", stop="{eos}"),
    "chatml": dict(_CHATML),
    "qwen": dict(_CHATML, default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    "qwen3": dict(_CHATML, think_in_answer=_EMPTY_THINK, specials=_CHATML["specials"] + ("<think>", "</think>")),
    "qwen3_nothink": dict(_CHATML, think_in_prompt=_EMPTY_THINK, specials=_CHATML["specials"] + ("<think>", "</think>")),
    "gemma": dict(_GEMMA),
    "gemma3": dict(_GEMMA),
    "llama3": dict(
        prefix="<|begin_of_text|>",
        user="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
        assistant="{content}<|eot_id|>",
        system="<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
        observation="<|start_header_id|>ipython<|end_header_id|>\n\n{content}<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n",
        stop="<|eot_id|>",
        specials=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    ),
}
TEMPLATE_NAMES = ("auto",) + tuple(TEMPLATES)


def get_template(name: str, tokenizer: Any) -> Template:
    """Template by name, with the tokenizer's bos/eos filled in. `auto`: the tokenizer's chat template, else `empty`."""
    if name == "auto":
        if getattr(tokenizer, "chat_template", None):
            return JinjaTemplate(tokenizer)
        name = "empty"
    if name not in TEMPLATES:
        import difflib
        close = difflib.get_close_matches(name, TEMPLATE_NAMES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"template: unknown template {name!r}{hint}; choose one of {', '.join(TEMPLATE_NAMES)}")
    fill = {"{bos}": tokenizer.bos_token or "", "{eos}": tokenizer.eos_token or "",
            "{auto_bos}": tokenizer.bos_token if _adds_bos(tokenizer) else ""}
    spec = dict(TEMPLATES[name])
    for key, value in spec.items():
        if isinstance(value, str):
            for placeholder, token in fill.items():
                value = value.replace(placeholder, token)
            spec[key] = value
    if not spec["stop"]:
        raise ConfigError(f"template: {name} ends answers with the eos token, but the tokenizer has none")
    return SlotTemplate(name=name, **spec)


def _adds_bos(tokenizer: Any) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    ids = tokenizer("a")["input_ids"]
    return bos is not None and bool(ids) and ids[0] == bos


def missing_special_tokens(template: Template, tokenizer: Any) -> list[str]:
    """Template tokens the tokenizer would split into pieces (a template made for another model family)."""
    vocab = tokenizer.get_vocab()
    return [t for t in template.special_tokens() if t not in vocab]


def split_prompt(template: Template, prompt_template: str, system: str | None = None) -> tuple[str, str]:
    """The rendered prompt of a classification row, cut at `{text}`: (text before it, text after it)."""
    rendered = template.render_prompt(prompt_template.replace("{text}", _SENTINEL), system)
    before, _, after = rendered.partition(_SENTINEL)
    return before, after


__all__ = ["Template", "SlotTemplate", "JinjaTemplate", "Piece", "get_template", "TEMPLATE_NAMES",
           "missing_special_tokens", "split_prompt"]
