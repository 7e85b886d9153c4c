"""What both decode batches share: the rows, their decode state on the device (state.py) and the read-backs of their
tokens (readback.py), and the host's side of the loop.

A caller drives a batch with four calls, none of which waits for the device on a step where no row joins or leaves:

    batch.add(rows)        prefill new rows (they join the batch; their first token is sampled on the device)
    batch.step()           one decode step for every row: forward, sampling, each row's update (a recorded graph)
    batch.poll(wait)       the tokens read back since the last poll, as `Update`s per row (wait: all of them)
    batch.keep(indices)    rows that finished (or whose owner went away) leave; the others move down

`needs_step()` says whether any row may still be producing tokens: when none may, the caller polls with wait=True
instead of stepping (every row's end is then on its way back).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from steadytune.model.decode.prefill import Row
from steadytune.model.decode.readback import Readbacks, Update
from steadytune.model.decode.sampling import GREEDY
from steadytune.model.decode.state import RING, DecodeState

READBACK_EVERY = 4   # decode steps between two copies of the board to the host (text streams in pieces this long)


class RunningBatch:
    def __init__(self, model: torch.nn.Module, pad_token_id: int, readback_every: Optional[int] = None):
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        self.rows: list[Row] = []
        self.state: Optional[DecodeState] = None
        self.readbacks = Readbacks(self.device)
        self.readback_every = min(readback_every or READBACK_EVERY, RING // 2)
        self.relayouts = 0          # cache copies for joins, leaves and growth (tests, profiles)
        self._unread = 0            # steps since the last copy of the board was issued

    def __len__(self) -> int:
        return len(self.rows)

    def needs_step(self) -> bool:
        return any(r.may_run for r in self.rows)

    def poll(self, wait: bool = False) -> list[Update]:
        """Tokens of every row read back since the last poll. With `wait`, everything the device has done so far."""
        if wait and self._unread:
            self._issue()
        return self.readbacks.collect(wait)

    def sampler_kind(self) -> int:
        return max((r.params.kind for r in self.rows), default=GREEDY)

    def adapter_index(self, adapter: Optional[str]) -> int:
        """Where the row's adapter sits in the LoRA banks (0: none), for batches that run LoRA from banks."""
        return 0

    # --- for the subclasses -------------------------------------------------------------------------------------
    def _check_rows(self, rows: Sequence[Row]) -> None:
        for row in rows:
            if row.params is None:
                raise ValueError("a row needs its sampling settings (Row.params) to join a decode batch")
            if not row.prompt_ids:
                raise ValueError("a row needs at least one prompt token")
            row.length, row.steps, row.received, row.finished = len(row.prompt_ids), 0, 0, None

    def _admit_state(self, first: int, rows: Sequence[Row], vocab: int) -> None:
        self.state.admit(first, [r.params for r in rows], [r.key for r in rows],
                         [self.adapter_index(r.adapter) for r in rows], [r.prompt_ids for r in rows], vocab)

    def _stepped(self) -> None:
        for row in self.rows:
            row.stepped()
        self._unread += 1
        if self._unread >= self.readback_every:
            self._issue()

    def _issue(self) -> None:
        self.readbacks.issue(self.state.board, self.rows)
        self._unread = 0
