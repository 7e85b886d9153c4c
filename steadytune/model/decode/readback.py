"""The sampled tokens back to the host, without the host waiting for each step.

Every few steps (and right after new rows join, so their first token is not held back) the batch issues a copy of
its board (state.py: each row's last RING tokens and its count) into pinned host memory and records a CUDA event
behind it; the copy is queued on the stream like a kernel and the host moves on to the next step. The host reads a
copy once its event has passed (`collect`), or waits for it when it has nothing else to do. A copy carries the rows
as they were when it was issued, so rows may join, leave and move between slots meanwhile.

At most DEPTH copies are in flight: issuing one more waits for the oldest, which bounds how far the host runs ahead
of the device (a few steps: far enough to keep the device busy, near enough to stream text promptly). On a CPU the
copy is made at once and nothing waits.

The host turns each row's new tokens into an `Update` with the rules the device applied (state.advance): a stop token
ends the row (and is the last token given), so does the budget; FAILED_ROW means the row's logits broke.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from steadytune.model.decode.prefill import Row
from steadytune.model.decode.sampling import FAILED_ROW
from steadytune.model.decode.state import RING

DEPTH = 3


@dataclass
class Update:
    row: Row
    tokens: list[int]             # the row's new tokens, a stop token included, FAILED_ROW never
    finished: Optional[str]       # "stop" | "length" | "failed" | None (more to come)


class Readbacks:
    def __init__(self, device: torch.device, depth: int = DEPTH):
        self.device, self.depth = device, depth
        self.cuda = device.type == "cuda"
        self._flight: deque = deque()      # (buffer, event, rows)
        self._free: list[torch.Tensor] = []
        self._ready: list[Update] = []     # read while making room for a copy, not yet collected
        self.issued = 0                    # copies issued (tests, profiles)
        self.waits = 0                     # copies the host had to wait for

    def issue(self, board: torch.Tensor, rows: Sequence[Row]) -> None:
        """Copy the first len(rows) rows of `board` back; `rows` are the rows in those slots now."""
        if not rows:
            return
        while len(self._flight) >= self.depth:
            self._ready.extend(self._read(wait=True))
        n = len(rows)
        buffer = self._buffer(board.shape)
        if self.cuda:
            buffer[:n].copy_(board[:n], non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            buffer[:n].copy_(board[:n])
            event = None
        self._flight.append((buffer, event, list(rows)))
        self.issued += 1

    def collect(self, wait: bool = False) -> list[Update]:
        """Updates from every copy that has arrived (with `wait`: from every copy in flight)."""
        updates, self._ready = self._ready, []
        while self._flight:
            batch = self._read(wait)
            if batch is None:
                break
            updates.extend(batch)
        return updates

    @property
    def in_flight(self) -> int:
        return len(self._flight)

    def _read(self, wait: bool) -> Optional[list[Update]]:
        buffer, event, rows = self._flight[0]
        if event is not None and not event.query():
            if not wait:
                return None
            self.waits += 1
            event.synchronize()
        self._flight.popleft()
        values = buffer[: len(rows)].tolist()
        self._free.append(buffer)
        return [u for u in (read_row(row, line) for row, line in zip(rows, values)) if u is not None]

    def _buffer(self, shape: torch.Size) -> torch.Tensor:
        while self._free:
            buffer = self._free.pop()
            if buffer.shape[0] >= shape[0]:
                return buffer
        buffer = torch.empty(shape, dtype=torch.int32)
        return buffer.pin_memory() if self.cuda else buffer


def read_row(row: Row, line: list[int]) -> Optional[Update]:
    """A row's new tokens from its board line (RING token columns, then its count)."""
    if row.finished is not None:
        return None
    count = line[RING]
    if count <= row.received:
        return None
    if count - row.received > RING:
        raise RuntimeError(f"decode: a row made {count - row.received} tokens between two read-backs, more than its "
                           f"board holds ({RING}); read back more often")
    tokens, finished = [], None
    stops = row.params.stops
    for j in range(row.received, count):
        token = line[j % RING]
        if token == FAILED_ROW:
            finished = "failed"
            break
        tokens.append(token)
        if token in stops:
            finished = "stop"
            break
    row.received = count
    if finished is None and count >= row.params.max_tokens:
        finished = "length"
    row.finished = finished
    return Update(row, tokens, finished)
