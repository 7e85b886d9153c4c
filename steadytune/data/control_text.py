"""Untrusted text -> token ids, with the control tokens only the template writes: a serve client's messages
(`--strict-special-tokens`) and a GRPO tool's results (stages/episodes.py: a tool that returns `<|im_end|>` text
would otherwise close its own turn and write the model's next one).

A chat template puts control tokens (`<|im_start|>`, `<|im_end|>`, `<start_of_turn>`, ...) around each message. A
client's message that holds the same strings would, tokenised together with the template's text, become those
control tokens: the client could close its own turn and write a system turn of its own. With `strict` (serve's
default) a control-token string inside a client's text is encoded as the ordinary text it is, so only the template
writes control tokens. A text that holds no such string is encoded exactly as without `strict` (the same call on
the same string), so nothing changes for the texts a trained run was trained and evaluated on.

How (the design of transformers' `apply_chat_template(sanitize_control_tokens=True)`, which covers Jinja chat
templates only, while serve renders the run's own template): each control token in a client's text is wrapped in
two private-use markers before the template renders it; the rendered text is split at the markers, the pieces
between them are encoded as usual (so the template's control tokens stay tokens), the marked ones as plain text
(the tokenizer's normalizer, pre-tokenizer and model, with no added token matched). A piece after the first is
encoded after a newline that is then removed, so a SentencePiece-style tokenizer does not add the prefix space it
adds at the start of a text.
"""

from __future__ import annotations

import re
from typing import Any

# Plane-15 private use: no template writes them; a client's own copies are dropped before marking.
MARK_START, MARK_END = "\U000f0000", "\U000f0001"


class UnsafeText(ValueError):
    """The tokenizer makes a control token out of plain text: the text cannot be encoded as text."""


def control_tokens(tokenizer: Any, template: Any) -> list[str]:
    """The tokenizer's special added tokens, and the added tokens the template writes as markers (not whitespace)."""
    markers = set(template.special_tokens()) if template is not None else set()
    tokens = {t.content for t in tokenizer.added_tokens_decoder.values()
              if t.content and not t.content.isspace() and (t.special or t.content in markers)}
    return sorted(tokens, key=len, reverse=True)  # the longest first: `<|im_end|>` before a `<|im` if both exist


class ClientText:
    """Marks and encodes the text of one served model's requests (one tokenizer, one template)."""

    def __init__(self, tokenizer: Any, template: Any, strict: bool = True):
        self.tokenizer = tokenizer
        self.strict = strict
        tokens = control_tokens(tokenizer, template) if strict else []
        self._ids = {tokenizer.convert_tokens_to_ids(t) for t in tokens}
        alternatives = "|".join(map(re.escape, tokens))
        self._controls = re.compile(alternatives) if tokens else None
        # a marked token -> its text in group 1; a marker on its own (a template that cut a string) -> no group
        self._marked = re.compile(f"{MARK_START}({alternatives}){MARK_END}|[{MARK_START}{MARK_END}]") if tokens else None

    def mark(self, text: str) -> str:
        """A client's text with each control token in it marked (unchanged when not strict or when it has none)."""
        if self._controls is None:
            return text
        text = text.replace(MARK_START, "").replace(MARK_END, "")
        return self._controls.sub(lambda m: f"{MARK_START}{m.group(0)}{MARK_END}", text)

    def encode(self, text: str) -> list[int]:
        """Rendered text (client parts marked by `mark`) -> ids; no special tokens added."""
        if not text:
            return []
        if self._marked is None or (MARK_START not in text and MARK_END not in text):
            return self._encode(text)
        pieces = self._marked.split(text)  # text, marked token (None for a lone marker), text, ...
        ids = self._encode(pieces[0]) if pieces[0] else []
        for i, piece in enumerate(pieces[1:], start=1):
            if piece:
                ids += self._after_newline(piece, as_text=i % 2 == 1)
        return ids

    def encode_parts(self, parts: list) -> list[int]:
        """A template's parts (text, or token ids), untrusted text in them marked by `mark`: as
        data/templates.encode_parts encodes them, each text part on its own, the marked pieces as plain text."""
        ids: list[int] = []
        for part in parts:
            ids += [part] if isinstance(part, int) else self.encode(part)
        return ids

    def encode_text(self, text: str) -> list[int]:
        """One client text on its own (a classification input)."""
        return self.encode(self.mark(text))

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _after_newline(self, piece: str, as_text: bool) -> list[int]:
        encode = self._plain if as_text else self._encode
        newline = encode("\n")
        ids = encode("\n" + piece)
        ids = ids[len(newline):] if ids[:len(newline)] == newline else encode(piece)
        if as_text and self._ids.intersection(ids):
            raise UnsafeText(f"this tokenizer encodes the text {piece!r} as a control token")
        return ids

    def _plain(self, text: str) -> list[int]:
        """Text with no added token matched. Read-only calls on the backend: a concurrent decode in the engine's
        thread is not disturbed (a fast tokenizer's `split_special_tokens` would flip a flag on the shared backend)."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:  # a slow (Python) tokenizer keeps no shared backend state
            return self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        splits = [s for s, _ in backend.pre_tokenizer.pre_tokenize_str(text)] if backend.pre_tokenizer else [text]
        return [token.id for split in splits for token in backend.model.tokenize(split)]
