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

from steadytune.data.prepare import template_for
from steadytune.data.templates import BOS, CONTENT, EOS, Template, encode_parts
from steadytune.model.decode.generate import params_from_generate_kwargs, stream
from steadytune.model.vision import is_vision_model, type_id_inputs


def run_template(cfg, tokenizer) -> Template:
    """The template the run trained with: `template:` of its config with the data keys that adjust it
    (tool_format, default_system, enable_thinking), built exactly as training built it."""

    return template_for(cfg, tokenizer)


# ---------------------------------------------------------------------------------------------------------
# The template as Jinja, for tokenizer_config.json / chat_template.jinja and the GGUF metadata
# ---------------------------------------------------------------------------------------------------------

def _literal(text: str) -> str:
    # A JSON string is a valid Jinja string literal (Jinja reads \n, \" and \uXXXX the same way).
    return json.dumps(text, ensure_ascii=False)


def _slot(template: Template, slot: tuple, content: str | None, lead: bool) -> str:
    """Jinja expression for a slot: its text elements as literals, the content slot as the expression `content`,
    bos/eos as the tokens' text (special tokens: tokenised back to the same single ids).

    Training tokenises each element on its own; a tokenizer that prepends a space to what it encodes (SentencePiece
    style, Metaspace prepend_scheme first/always: Llama 2, Mistral) thus gives every element a leading space token
    unless the element starts with a space or a special token. `lead()` (defined in the template) writes that space,
    so one string tokenises to the same ids. lead: whether this tokenizer does so (`_prepends_space`), and the
    text is an element of its own (not a fused system prompt, which becomes part of the user's element)."""
    terms: list[str] = []
    for element in slot:
        if element is BOS:
            text = template.tokenizer.bos_token if template.tokenizer.bos_token_id is not None else ""
            terms.append(_literal(text or ""))
        elif element is EOS:
            terms.append(_literal(template.eos_token or "") if template.eos_token_id is not None else "")
        elif element:
            if content is not None and CONTENT in element:
                before, _, after = element.partition(CONTENT)
                text = " + ".join(t for t in (_literal(before) if before else "", f"({content})",
                                              _literal(after) if after else "") if t)
            else:
                text = _literal(element)
            terms.append(f"lead({text})" if lead else text)
    return " + ".join(t for t in terms if t) or '""'


def _prepends_space(tokenizer) -> bool:
    """Whether encoding a text on its own starts it with the tokenizer's space marker (▁)."""
    try:
        first = tokenizer.convert_ids_to_tokens(tokenizer.encode("a", add_special_tokens=False))[0]
    except Exception:  # a tokenizer that cannot say: treat it as one that adds nothing
        return False
    return first.startswith("\u2581")


def _lead_macro(tokenizer) -> str:
    # Added tokens are split off before the space is prepended: an element starting with one gets no space.
    specials = sorted(tokenizer.get_added_vocab(), key=len, reverse=True)
    return ("{%- macro lead(s) -%}{{- (' ' + s) if (s and not s.startswith(' ') and not s.startswith("
            + _literal_tuple(specials) + ")) else s -}}{%- endmacro -%}")


def _literal_tuple(items: list[str]) -> str:
    return "(" + ", ".join(_literal(i) for i in items) + ("," if len(items) == 1 else "") + ")"


def chat_template_of(template: Template) -> str:
    """A Jinja chat_template that renders conversations as `template` does, so that `apply_chat_template` of an
    exported tokenizer (tokenize=True) gives the ids the run trained on and generates after.

    Roles: system (first message only), user, assistant, tool / observation. As in training, the assistant header
    is part of each user turn, so `add_generation_prompt` adds nothing, except the empty think block of a reasoning
    template when `enable_thinking` is false (a variable callers may pass, as with Qwen3's own template). Earlier
    answers lose their think blocks, as in generation; tool definitions and tool calls are not rendered."""
    t = template
    lead = _prepends_space(t.tokenizer)
    think_open, think_close = t.thought_words
    empty_thought = _literal(think_open + think_close)
    system_expr = "system_text"
    lines = [
        _lead_macro(t.tokenizer) if lead else "",
        "{%- if messages and messages[0]['role'] == 'system' -%}",
        "{%- set system_text = messages[0]['content'] -%}{%- set turns = messages[1:] -%}",
        "{%- else -%}",
        f"{{%- set system_text = {_literal(t.default_system)} -%}}{{%- set turns = messages -%}}",
        "{%- endif -%}",
        f"{{%- set thinking = enable_thinking if enable_thinking is defined else "
        f"{'false' if t.enable_thinking is False else 'true'} -%}}",
        f"{{{{- {_slot(t, t.prefix, None, lead)} -}}}}" if t.prefix else "",
    ]
    if t.fuse_system:
        # No system role: the system slot's text opens the first user turn.
        lines.append(f"{{%- set ns = namespace(pending=({_slot(t, t.system, system_expr, lead=False)}) if system_text else '') -%}}")
        user_content = "ns.pending + message['content']"
    else:
        lines.append(f"{{%- if system_text -%}}{{{{- {_slot(t, t.system, system_expr, lead)} -}}}}{{%- endif -%}}")
        lines.append("{%- set ns = namespace(pending='') -%}")
        user_content = "message['content']"
    # An answer's think block: dropped from earlier answers (generation's rule) and when thinking is off; the last
    # answer without one gets the empty block, on the answer side when thinking, on the prompt side when not.
    strip = f"message['content'].split({_literal(think_close.strip())})[-1].lstrip('\\n')"
    has_thought = f"({_literal(think_open.strip())} in message['content'] or {_literal(think_close.strip())} in message['content'])"
    if t.reasoning:
        keep = "loop.last and thinking" if not t.preserve_thinking else "thinking"
        answer = (f"((message['content'] if {has_thought} else {empty_thought} + message['content']) "
                  f"if ({keep}) else {strip})")
        last_user_suffix = f"{{%- if not thinking and loop.revindex == 2 and turns[-1]['role'] == 'assistant' -%}}" \
                           f"{{{{- {empty_thought} -}}}}{{%- endif -%}}"
    else:
        answer, last_user_suffix = "message['content']", ""
    lines += [
        "{%- for message in turns -%}",
        "{%- if message['role'] == 'user' -%}",
        f"{{{{- {_slot(t, t.user, user_content, lead)} -}}}}",
        last_user_suffix,
        "{%- set ns.pending = '' -%}",
        "{%- elif message['role'] == 'assistant' -%}",
        f"{{{{- {_slot(t, t.assistant, answer, lead)} -}}}}",
        "{%- elif message['role'] in ('tool', 'observation', 'ipython') -%}",
        f"{{{{- {_slot(t, t.observation, 'message[' + _literal('content') + ']', lead)} -}}}}",
        "{%- endif -%}",
        "{%- endfor -%}",
    ]
    if t.reasoning:
        lines.append(f"{{%- if add_generation_prompt and not thinking -%}}{{{{- {empty_thought} -}}}}{{%- endif -%}}")
    return "".join(line for line in lines if line)


def stop_token_ids(template: Template, tokenizer=None) -> list[int]:
    """Ids that end an answer: eos and every stop word of the template (<end_of_turn>, <|im_end|>, ...)."""
    return template.stop_token_ids()


# ---------------------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------------------

def conversation_ids(template: Template, tokenizer, messages: list[dict], system: str | None = None) -> list[int]:
    """The prompt ids for the next answer after `messages` (which end with a user turn), encoded as in training:
    each slot element tokenised on its own."""
    return encode_parts(tokenizer, template.generation_prompt_parts(messages, system))


def conversation_prompt(template: Template, messages: list[dict], system: str | None = None) -> str:
    """The same prompt as text (for display and for engines that take text)."""
    return template.render_generation_prompt(messages, system)


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


def predict_sampling_note(cfg, sampling: Sampling) -> str | None:
    """How this do_predict's decoding differs from LLaMA-Factory's, or None: LLaMA-Factory's do_predict samples with
    its generation keys (do_sample true, temperature 0.95, top_p 0.7, top_k 50 unless set; tests/golden/
    lf_fidelity.json), ours decodes greedily unless do_sample is set, so that its BLEU/ROUGE repeat."""
    g = cfg.infer
    if g.do_sample is not None or sampling.do_sample:
        return None
    return (f"greedy here, so the scores repeat; differs from LLaMA-Factory's do_predict, which samples (do_sample true, "
            f"temperature {g.temperature}, top_p {g.top_p}, top_k {g.top_k}, max_new_tokens {sampling.max_new_tokens}) "
            "and scores differently every run; do_sample: true samples as it does")


def stream_answer(model, tokenizer, prompt_ids: Sequence[int], sampling: Sampling, stop_ids: Sequence[int],
                  skip_special_tokens: bool = True, seed: int | None = None,
                  pixels: dict | None = None) -> Iterator[str]:
    """Yield the answer's text as it is generated: on the decode engine (model/decode, the one serve uses; the
    tokens come back every few steps, `seed` keys the sampled ones), beam search on transformers' `generate`. A piece
    is held back while it ends inside a character (a multi-byte character split across tokens). `pixels`: a
    vision-language model's image inputs for the prompt (infer/media.py), answered by transformers' `generate`, which
    takes them at the prefill (the engine decodes text models' rows only)."""
    params = params_from_generate_kwargs(sampling.generate_kwargs(), stop_ids)
    # a vision-language model stays on generate, text prompts too: the engine's forward is the text decoder's
    if params is None or pixels or is_vision_model(model):
        yield from _stream_with_transformers(model, tokenizer, prompt_ids, sampling, stop_ids, skip_special_tokens,
                                             pixels)
        return
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    tokens: list[int] = []
    sent = ""
    for piece in stream(model, prompt_ids, params, pad if pad is not None else 0, seed):
        tokens.extend(piece)
        text = tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)
        if text.endswith("\ufffd") or not text.startswith(sent):
            continue
        if len(text) > len(sent):
            yield text[len(sent):]
            sent = text
    text = tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)
    if len(text) > len(sent):
        yield text[len(sent):] if text.startswith(sent) else text


def _stream_with_transformers(model, tokenizer, prompt_ids: Sequence[int], sampling: Sampling,
                              stop_ids: Sequence[int], skip_special_tokens: bool,
                              pixels: dict | None = None) -> Iterator[str]:
    """transformers' TextIteratorStreamer, generate in a thread (beam search, and prompts with images)."""
    from transformers import TextIteratorStreamer

    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=skip_special_tokens)
    device = next(model.parameters()).device
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    kwargs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), streamer=streamer,
                  eos_token_id=list(stop_ids) or None, pad_token_id=pad, **sampling.generate_kwargs())
    if pixels:
        kwargs.update({k: v.to(device) for k, v in pixels.items()}, **type_id_inputs(model, input_ids))
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
