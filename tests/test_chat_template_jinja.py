"""The Jinja chat_template an export writes renders every template name exactly as training encodes it:
`apply_chat_template(..., tokenize=True)` of the exported tokenizer gives the generation prompt's ids, with and
without a system prompt, over several turns, with think blocks in earlier answers and thinking on or off.

Uses the two small tokenizers of tests/golden/tokenizers (byte-level BPE and metaspace), so the templates' marker
tokens are tokenised the way real vocabularies tokenise them."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from steadytune.data.templates import TEMPLATES, get_template
from steadytune.infer.generate import chat_template_of, conversation_ids

TOKENIZERS = Path(__file__).parent / "golden" / "tokenizers"

CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "How are you?"}],
    "history": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, friend."},
                {"role": "user", "content": "Name three colours.\nShort, please."}],
    "history with thoughts": [{"role": "user", "content": "2+2?"},
                              {"role": "assistant", "content": "<think>\nsmall sum\n</think>\n\n4"},
                              {"role": "user", "content": "And 3+3?"}],
    "tool result": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Checking."},
                    {"role": "observation", "content": "{\"sunny\": true}"}],
}


def tokenizer(style: str) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(TOKENIZERS / style)


@pytest.mark.parametrize("style", ["bytelevel", "metaspace"])
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_exported_chat_template_gives_the_training_prompt_ids(name, style):
    tok = tokenizer(style)
    checked = 0
    for thinking in (True, False):
        template = get_template(name, tok, enable_thinking=thinking)
        tok.chat_template = chat_template_of(template)
        for system in (None, "Answer in one word."):
            for label, messages in CONVERSATIONS.items():
                chat = ([{"role": "system", "content": system}] if system else []) + messages
                if messages[-1]["role"] == "observation":
                    chat = chat[:-1] + [{"role": "tool", "content": messages[-1]["content"]}]
                expected = conversation_ids(template, tok, messages, system)
                got = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
                assert list(got) == expected, (f"{name} ({style}), {label}, system={system!r}, thinking={thinking}:\n"
                                               f"{tok.decode(got)!r}\n!=\n{tok.decode(expected)!r}")
                checked += 1
    assert checked == 16


def test_a_default_system_prompt_is_in_the_template_and_a_given_one_replaces_it():
    tok = tokenizer("bytelevel")
    template = get_template("qwen", tok)
    tok.chat_template = chat_template_of(template)
    plain = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert "You are Qwen" in plain
    mine = tok.apply_chat_template([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
                                   tokenize=False, add_generation_prompt=True)
    assert "Be terse." in mine and "You are Qwen" not in mine


def test_enable_thinking_false_passed_at_call_time_puts_the_empty_think_block_in_the_prompt():
    tok = tokenizer("bytelevel")
    tok.chat_template = chat_template_of(get_template("qwen3", tok))
    chat = [{"role": "user", "content": "Hi"}]
    thinking = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    not_thinking = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert not_thinking == thinking + "<think>\n\n</think>\n\n"


@pytest.mark.parametrize("style", ["bytelevel", "metaspace"])
def test_a_classification_runs_exported_template_gives_its_training_prompt(style):
    """A classification row's prompt opens with the bos the tokenizer adds to plain text (metaspace here, Gemma in
    the demo); the exported chat template of `empty_eos` writes it too, so a served or llama.cpp prompt is the
    one the model was trained on (before, training had the bos and the exported template did not)."""
    from steadytune.data.encode import encode_classification_prompt

    tok = tokenizer(style)
    template = get_template("empty_eos", tok)
    prompt_template = "Review: {text}\nSentiment:"
    trained = encode_classification_prompt(template, tok, prompt_template, "Fast delivery, works well.", 256)
    tok.chat_template = chat_template_of(template)
    served = tok.apply_chat_template([{"role": "user", "content": prompt_template.format(text="Fast delivery, works well.")}],
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    assert (trained[0] == tok.bos_token_id) == (served[0] == tok.bos_token_id) == (style == "metaspace")
    if style == "bytelevel":
        assert list(served) == trained
    # (metaspace: the row's text is encoded apart from the prompt around it, so each part gets its own leading
    # space marker and one string cannot give the same ids; Gemma's tokenizer adds no such space: checked by hand.)
