"""Chat with a finished run inside the studio: infer/chat.py's session (the run's template, system prompt, sampling
and stop tokens; a classification run's label scores), loaded once and kept while the page talks to that run.

Beside the run, the base model answers the same message: for a LoRA run that is the same weights with the adapter
switched off (peft's `disable_adapter`), so nothing is loaded twice. Answers stream as they are generated. One
answer is made at a time (a lock): two pages share the one model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

from steadytune.errors import UserError
from steadytune.infer.chat import ChatSession
from steadytune.infer.generate import conversation_ids, stream_answer
from steadytune.infer.loading import LORA, open_run

MAX_TEXT = 20_000          # characters of one message
MAX_TURNS = 40             # messages of history sent back per side
MAX_NEW_TOKENS = 1024


class ChatModels:
    """The session of the run being talked to (one at a time: another run's replaces it)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.key: Optional[tuple] = None
        self.session: Optional[ChatSession] = None

    def _session(self, folder: Path) -> ChatSession:
        adapter = folder / "adapter_model.safetensors"
        key = (str(folder.resolve()), adapter.stat().st_mtime_ns if adapter.exists() else None)
        if self.key != key:
            self.session, self.key = None, None   # free the previous model first
            self.session = ChatSession.load(open_run(str(folder)), quiet=True)
            self.key = key
        return self.session

    def forget(self, folder: Path) -> None:
        """Drop the loaded model when its run folder is about to change (a new training there)."""
        with self.lock:
            if self.key and self.key[0] == str(folder.resolve()):
                self.session, self.key = None, None

    def stream(self, folder: Path, text: str, history: dict, side_by_side: bool, greedy: bool,
               max_new_tokens: Optional[int], system: Optional[str]) -> Iterator[dict]:
        """Events: {"status"}, then per side {"side", "delta"} ... {"side", "done"}; a classification run gives
        {"side", "label", "probability", "probabilities"} instead; {"error"} on failure."""
        text = check_text(text, "message")
        with self.lock:
            yield {"status": "loading the model" if self.key is None else "answering"}
            try:
                session = self._session(folder)
            except (UserError, OSError) as e:
                yield {"error": str(e)}
                return
            sides = ["run"] + (["base"] if side_by_side else [])
            base_note = None
            if side_by_side and (session.run.kind != LORA or not hasattr(session.model, "disable_adapter")):
                sides, base_note = ["run"], "no base model beside this run: it is not a LoRA adapter"
            yield {"ready": True, "sides": sides, "classification": session.scorer is not None,
                   "note": base_note, "describe": session.run.describe()}
            for side in sides:
                with self._side(session, side):
                    if session.scorer is not None:
                        label, probability, probabilities = session.scorer.answer(text)
                        yield {"side": side, "label": label, "probability": probability,
                               "probabilities": probabilities}
                    else:
                        yield from self._generate(session, side, text, history.get(side) or [], greedy,
                                                  max_new_tokens, system)
                yield {"side": side, "done": True}

    @staticmethod
    @contextlib.contextmanager
    def _side(session: ChatSession, side: str):
        if side == "base":
            with session.model.disable_adapter():
                yield
        else:
            yield

    @staticmethod
    def _generate(session: ChatSession, side: str, text: str, history: list, greedy: bool,
                  max_new_tokens: Optional[int], system: Optional[str]) -> Iterator[dict]:
        messages = [m for m in history[-MAX_TURNS:] if isinstance(m, dict) and m.get("role") in ("user", "assistant")]
        messages = [{"role": m["role"], "content": check_text(m.get("content", ""), "history")} for m in messages]
        messages.append({"role": "user", "content": text})
        sampling = session.sampling
        if greedy or max_new_tokens:
            sampling = dataclasses.replace(sampling, do_sample=False if greedy else sampling.do_sample,
                                           max_new_tokens=max(1, min(int(max_new_tokens or sampling.max_new_tokens),
                                                                     MAX_NEW_TOKENS)))
        while True:
            ids = conversation_ids(session.template, session.tokenizer, messages, system or None)
            limit = session.max_prompt_tokens
            if limit is None or len(ids) <= limit or len(messages) <= 1:
                break
            messages = messages[2:]   # the oldest exchange goes first when the context would overflow
        chunks = stream_answer(session.model, session.tokenizer, ids, sampling, session.stops,
                               session.run.cfg.infer.skip_special_tokens)
        try:
            for chunk in chunks:
                if chunk:
                    yield {"side": side, "delta": chunk}
        finally:
            for _ in chunks:   # a page that went away: let generate finish before the model is used again
                pass


def check_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{what}: expected text")
    if len(value) > MAX_TEXT:
        raise UserError(f"{what}: at most {MAX_TEXT:,} characters")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise UserError(f"{what}: holds a lone surrogate, which is not text")
    return value
