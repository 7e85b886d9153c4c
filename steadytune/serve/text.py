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
        self.window_sent = 0       # characters of the current window's new text already in self.text
        self.text = ""             # the answer's text so far (released and held)
        self.released = 0          # characters of self.text given to the client
        self.stopped = False

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        """Take one generated token; -> the text that may be sent now ('' while waiting). Sets `stopped` when a
        stop string appeared (the text then ends before it)."""
        self.ids.append(token_id)
        self._decode_new(final=False)
        return self._release(final=False)

    def finish(self) -> str:
        """The sequence ended (end token or length): whatever is still held or undecoded."""
        self._decode_new(final=True)
        return self._release(final=True)

    def _decode_new(self, final: bool) -> None:
        """Append the text the window ids[prefix:] adds beyond ids[prefix:read]. A trailing replacement character
        is an unfinished UTF-8 character: it waits (until the end). The window moves on only at a clean
        character boundary, so a token stream whose characters straddle tokens still comes out, one step late."""
        before = self._decode(self.ids[self.prefix:self.read])
        after = self._decode(self.ids[self.prefix:])
        ready = after if final else after.rstrip("\ufffd")
        start = len(before) + self.window_sent
        if len(ready) > start:
            self.text += ready[start:]
            self.window_sent = len(ready) - len(before)
        if ready == after and len(after) > len(before):
            self.prefix, self.read, self.window_sent = self.read, len(self.ids), 0

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
