"""Generation as the run trained: its chat template (as our pieces, and as a Jinja `chat_template` for every other
tool), its stop tokens, and the generation keys of the config (LLaMA-Factory's names and defaults).

The training side owns the templates (`data/templates.py`); this module only reads them, so the prompt a chat or
an exported model sees is the prompt the adapter was trained on.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from steadytune.data.templates import JinjaTemplate, SlotTemplate, Template, get_template


def run_template(cfg, tokenizer) -> Template:
    """The template the run trained with (`template:` of its config; `auto` = the tokenizer's own)."""
    return get_template(cfg.data.template, tokenizer)


# ---------------------------------------------------------------------------------------------------------
# The template as Jinja, for tokenizer_config.json / chat_template.jinja and the GGUF metadata
# ---------------------------------------------------------------------------------------------------------

def _literal(text: str) -> str:
    # A JSON string is a valid Jinja string literal (Jinja reads \n, \" and \uXXXX the same way).
    return json.dumps(text, ensure_ascii=False)


def _slot(slot: str, content: str) -> str:
    """Jinja expression for `slot` with {content} replaced by the expression `content`."""
    before, _, after = slot.partition("{content}")
    return " + ".join(part for part in (_literal(before) if before else "", content, _literal(after) if after else "")
                      if part)


def chat_template_of(template: Template) -> str:
    """A Jinja chat_template that renders conversations exactly as `template` does in training.

    Roles: system (first message only), user, assistant, tool. Our slot templates end a user turn with the
    assistant header, so the header is written with every user turn; `add_generation_prompt` adds nothing more
    except, for qwen3, the empty think block when `enable_thinking=false` (as Qwen3's own template does).
    The tokenizer's own template (`template: auto`) is returned as it is."""
    if isinstance(template, JinjaTemplate):
        return template.tokenizer.chat_template
    assert isinstance(template, SlotTemplate)
    t = template
    system_slot = _slot(t.system, "system_text")
    observation = t.observation or t.user
    lines = [
        "{%- if messages and messages[0]['role'] == 'system' -%}",
        "{%- set system_text = messages[0]['content'] -%}{%- set turns = messages[1:] -%}",
        "{%- else -%}",
        f"{{%- set system_text = {_literal(t.default_system) if t.default_system else 'none'} -%}}"
        "{%- set turns = messages -%}",
        "{%- endif -%}",
        f"{{{{- {_literal(t.prefix)} -}}}}" if t.prefix else "",
    ]
    if t.system_in_first_user:
        lines.append("{%- set ns = namespace(pending=system_text) -%}")
    else:
        lines.append(f"{{%- if system_text -%}}{{{{- {system_slot} -}}}}{{%- endif -%}}")
    user_content = "message['content']"
    if t.system_in_first_user:
        user_content = f"(({_slot(t.system, 'ns.pending')}) if ns.pending else '') + message['content']"
    think_in_prompt = f" + {_literal(t.think_in_prompt)}" if t.think_in_prompt else ""
    answer = "message['content']"
    if t.think_in_answer:
        answer = f"(message['content'] if '<think>' in message['content'] else {_literal(t.think_in_answer)} + message['content'])"
    lines += [
        "{%- for message in turns -%}",
        "{%- if message['role'] == 'user' -%}",
        f"{{{{- {_slot(t.user, user_content)}{think_in_prompt} -}}}}",
        "{%- set ns.pending = none -%}" if t.system_in_first_user else "",
        "{%- elif message['role'] == 'assistant' -%}",
        f"{{{{- {_slot(t.assistant, answer)} -}}}}",
        "{%- elif message['role'] in ('tool', 'observation', 'ipython') -%}",
        f"{{{{- {_slot(observation, 'message[' + _literal('content') + ']')} -}}}}",
        "{%- endif -%}",
        "{%- endfor -%}",
    ]
    if t.think_in_answer:
        lines.append("{%- if add_generation_prompt and enable_thinking is defined and enable_thinking is false -%}"
                     f"{{{{- {_literal(t.think_in_answer)} -}}}}{{%- endif -%}}")
    return "".join(line for line in lines if line)


def stop_token_ids(template: Template, tokenizer) -> list[int]:
    """eos plus the template's end-of-answer token (e.g. <end_of_turn>, <|im_end|>) when it is one token."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    stop = tokenizer(template.stop, add_special_tokens=False)["input_ids"] if template.stop else []
    if len(stop) == 1 and stop[0] not in ids:
        ids.append(stop[0])
    return ids


# ---------------------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------------------

def conversation_prompt(template: Template, messages: list[dict], system: str | None = None) -> str:
    """The prompt text for the next answer after `messages` (which end with a user turn), as in training."""
    if isinstance(template, JinjaTemplate):
        chat = template._as_chat(messages, system, None)
        return template.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    return "".join(piece.text for piece in template.render(messages, system))


def encode_prompt(tokenizer, text: str) -> list[int]:
    # The template already holds bos and every special token; the tokenizer must not add another bos.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------------------------------------
# Generation settings
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Sampling:
    """What model.generate gets, from the config's generation keys."""
    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    num_beams: int
    repetition_penalty: float
    length_penalty: float

    def generate_kwargs(self) -> dict:
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample,
                                  "num_beams": self.num_beams, "repetition_penalty": self.repetition_penalty}
        if self.do_sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        else:  # greedy: say so, or a model's generation_config.json may switch sampling back on
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if self.num_beams > 1:
            kwargs["length_penalty"] = self.length_penalty
        return kwargs

    def describe(self) -> str:
        if not self.do_sample:
            how = "greedy" if self.num_beams == 1 else f"beam search ({self.num_beams})"
        else:
            how = f"sampling (temperature {self.temperature}, top_p {self.top_p}, top_k {self.top_k})"
        penalty = f", repetition_penalty {self.repetition_penalty}" if self.repetition_penalty != 1.0 else ""
        return f"{how}, max_new_tokens {self.max_new_tokens}{penalty}"


def sampling_of(cfg, sample_by_default: bool) -> Sampling:
    """Generation settings: LLaMA-Factory's keys and defaults; `do_sample` unset means the command's default
    (chat samples, as LLaMA-Factory's chat does; predict decodes greedily so its output is reproducible)."""
    g = cfg.infer
    do_sample = sample_by_default if g.do_sample is None else g.do_sample
    return Sampling(cfg.train.max_new_tokens, do_sample, g.temperature, g.top_p, g.top_k, g.num_beams,
                    g.repetition_penalty, g.length_penalty)


def stream_answer(model, tokenizer, prompt_ids: Sequence[int], sampling: Sampling, stop_ids: Sequence[int],
                  skip_special_tokens: bool = True) -> Iterator[str]:
    """Yield the answer's text as it is generated (transformers' TextIteratorStreamer, generate in a thread)."""
    from transformers import TextIteratorStreamer

    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=skip_special_tokens)
    device = next(model.parameters()).device
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    kwargs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), streamer=streamer,
                  eos_token_id=list(stop_ids) or None, pad_token_id=pad, **sampling.generate_kwargs())
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with torch.inference_mode():
                model.generate(**kwargs)
        except BaseException as e:  # re-raised in the caller's thread below
            errors.append(e)
            streamer.end()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield from streamer
    thread.join()
    if errors:
        raise errors[0]
