"""Generated token ids -> the text a client sees, one piece at a time.

Tokens are decoded incrementally (a token that ends inside a UTF-8 character waits for the next one), with the
last prompt tokens as context so a sentencepiece word's leading space survives. Stop strings end the answer
before their first occurrence; a tail that could still become a stop string is held back until it cannot.
"""

from __future__ import annotations

from typing import Any, Sequence

CONTEXT_TOKENS = 5  # prompt tokens decoded with the first generated ones (the leading space of a word)


class TextAssembler:
    def __init__(self, tokenizer: Any, stop: Sequence[str] = (), prompt_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.ids = list(prompt_ids[-CONTEXT_TOKENS:]) if len(prompt_ids) else []
        self.prefix = 0            # ids[prefix:read] is what the last emitted text was decoded from
        self.read = len(self.ids)
        self.text = ""             # the answer's text so far (released and held)
        self.released = 0          # characters of self.text given to the client
        self.stopped = False

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        """Take one generated token; -> the text that may be sent now ('' while waiting). Sets `stopped` when a
        stop string appeared (the text then ends before it)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix:self.read])
        after = self._decode(self.ids[self.prefix:])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before):]
            self.prefix, self.read = self.read, len(self.ids)
        return self._release(final=False)

    def finish(self) -> str:
        """The sequence ended (end token or length): whatever is still held or undecoded."""
        before = self._decode(self.ids[self.prefix:self.read])
        after = self._decode(self.ids[self.prefix:])
        if len(after) > len(before):
            self.text += after[len(before):]
            self.prefix = self.read = len(self.ids)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self.stopped:
            return ""
        hits = [i for i in (self.text.find(s, self.released) for s in self.stop) if i >= 0]
        if hits:
            end = min(hits)
            self.text = self.text[:end]
            self.stopped = True
        elif final:
            end = len(self.text)
        else:
            end = len(self.text) - self._partial_stop_suffix()
        piece = self.text[self.released:end]
        self.released = max(self.released, end)
        return piece

    def _partial_stop_suffix(self) -> int:
        """Length of the longest tail of the unreleased text that begins some stop string."""
        pending = self.text[self.released:]
        best = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(pending)), best, -1):
                if pending.endswith(s[:k]):
                    best = k
                    break
        return best
