"""Everything about the running rows that a decode step reads or changes, as tensors on the device, one row per slot:
the next input token, the length (= the position of that token), each row's sampling settings, key, stop tokens and
token budget, whether it is done, its adapter, and a board where its sampled tokens are written.

A step samples every row from its logits (sampling.sample_rows) and `advance`s it here: the token goes to the row's
board, becomes its next input, and ends the row when it is a stop token, when the budget is spent or when the logits
were broken. So a recorded step (graphs.py) carries the whole loop: the host neither reads a token nor decides
anything between steps; it copies the board back now and then (readback.py) to turn tokens into text.

The board is [slots, RING + 1] int32: token j of a row's completion sits in column j % RING, the last column counts
the row's tokens. A done row neither writes nor counts (its slot decodes padding until the host lets it go), so the
count tells the host exactly which columns are new since its last look; the host must look at least once every RING
steps (readback.py issues a copy every few steps).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from steadytune.model.decode.sampling import FAILED_ROW, RowSettings, SamplingParams, sample_rows
from steadytune.model.decode.transfer import to_device

RING = 64            # tokens a row's board holds between two looks of the host
NO_STOP = -2         # fills a row's unused stop-token places (FAILED_ROW is -1; token ids are >= 0)


class DecodeState:
    def __init__(self, slots: int, pad_token_id: int, device: torch.device, stop_width: int = 4):
        self.device, self.pad_token_id = device, pad_token_id
        self.vocab: Optional[int] = None
        self.seen: Optional[torch.Tensor] = None     # [slots, vocab] bool, made when a row has a repetition penalty

        def zeros(dtype, *shape):
            return torch.zeros(slots, *shape, dtype=dtype, device=device)
        self.next_ids = torch.full((slots, 1), pad_token_id, dtype=torch.long, device=device)
        self.lengths = zeros(torch.long)                 # tokens in each slot's cache; 0 for idle slots
        self.done = torch.ones(slots, dtype=torch.bool, device=device)   # idle slots are done
        self.count = zeros(torch.long)                   # tokens sampled so far
        self.budget = zeros(torch.long)                  # max_tokens
        self.temperature = zeros(torch.float32)
        self.top_k = zeros(torch.long)
        self.top_p = torch.ones(slots, dtype=torch.float32, device=device)
        self.min_p = zeros(torch.float32)
        self.penalty = torch.ones(slots, dtype=torch.float32, device=device)
        self.keys = zeros(torch.long)
        self.adapter = zeros(torch.long)                 # the LoRA bank index of each row's adapter (0: none)
        self.stops = torch.full((slots, stop_width), NO_STOP, dtype=torch.long, device=device)
        self.board = zeros(torch.int32, RING + 1)

    @property
    def slots(self) -> int:
        return self.lengths.shape[0]

    def _per_slot(self) -> list[str]:
        return ["next_ids", "lengths", "done", "count", "budget", "temperature", "top_k", "top_p", "min_p", "penalty",
                "keys", "adapter", "stops", "board"] + (["seen"] if self.seen is not None else [])

    # --- changes between steps (each one may reallocate: the caller forgets its recorded steps) ------------------
    def grow(self, slots: int) -> None:
        """Room for `slots` rows; new slots are idle."""
        extra = slots - self.slots
        if extra <= 0:
            return
        idle = DecodeState(extra, self.pad_token_id, self.device, self.stops.shape[1])
        if self.seen is not None:
            idle.seen = self.seen.new_zeros(extra, self.seen.shape[1])
        for name in self._per_slot():
            setattr(self, name, torch.cat([getattr(self, name), getattr(idle, name)]))

    def needs_realloc(self, params: Sequence[SamplingParams], vocab: int) -> bool:
        """Whether admitting rows with these settings reallocates a tensor (wider stop lists, the seen-token table)."""
        return (max((len(p.stops) for p in params), default=0) > self.stops.shape[1]
                or (any(p.penalises for p in params) and self.seen is None))

    def admit(self, first: int, params: Sequence[SamplingParams], keys: Sequence[int], adapters: Sequence[int],
              prompts: Sequence[Sequence[int]], vocab: int) -> None:
        """Set slots first.. for new rows (their lengths are set by the prefill): settings, key, budget, stop tokens;
        with a repetition penalty, their prompt's tokens count as seen."""
        n = len(params)
        self.vocab = vocab
        width = max((len(p.stops) for p in params), default=0)
        if width > self.stops.shape[1]:
            self.stops = torch.cat([self.stops, self.stops.new_full((self.slots, width - self.stops.shape[1]),
                                                                    NO_STOP)], dim=1)
        if any(p.penalises for p in params) and self.seen is None:
            self.seen = torch.zeros(self.slots, vocab, dtype=torch.bool, device=self.device)
        rows = slice(first, first + n)
        floats = to_device([[p.temperature, p.top_p, p.min_p, p.repetition_penalty] for p in params], torch.float32,
                           self.device)
        ints = to_device([[p.max_tokens, p.top_k, k, a] for p, k, a in zip(params, keys, adapters)], torch.long,
                         self.device)
        stops = to_device([sorted(p.stops) + [NO_STOP] * (self.stops.shape[1] - len(p.stops)) for p in params],
                          torch.long, self.device)
        self.temperature[rows], self.top_p[rows], self.min_p[rows], self.penalty[rows] = floats.unbind(1)
        self.budget[rows], self.top_k[rows], self.keys[rows], self.adapter[rows] = ints.unbind(1)
        self.stops[rows] = stops
        self.count[rows] = 0
        self.done[rows] = False
        self.board[rows] = 0
        if self.seen is not None:
            self.seen[rows] = False
            marked = [(i, t) for i, (p, prompt) in enumerate(zip(params, prompts)) if p.penalises for t in prompt]
            if marked:
                where = to_device(marked, torch.long, self.device)
                self.seen[first + where[:, 0], where[:, 1]] = True

    def keep(self, keep: Sequence[int], count: int) -> None:
        """Of the first `count` slots, keep those at `keep`, moved down to slots 0..len(keep)-1 in that order; the
        rest become idle."""
        if list(keep) == list(range(count)):
            return
        index = to_device(list(keep), torch.long, self.device)
        for name in self._per_slot():
            tensor = getattr(self, name)
            tensor[: len(keep)] = tensor[index]
        self.make_idle(len(keep), count)

    def make_idle(self, start: int, stop: int) -> None:
        self.done[start:stop] = True
        self.lengths[start:stop] = 0
        self.next_ids[start:stop] = self.pad_token_id

    # --- the step (recorded: device tensors only, no waits) --------------------------------------------------
    def settings(self, first: int, rows: int) -> RowSettings:
        s = slice(first, first + rows)
        return RowSettings(self.temperature[s], self.top_k[s], self.top_p[s], self.min_p[s], self.penalty[s],
                           self.keys[s], self.count[s])

    def advance(self, logits: torch.Tensor, first: int, kind: int, fed: bool, sampler=sample_rows) -> torch.Tensor:
        """Sample rows first.. (as many as `logits` has) and move them on: write each live row's token to its board
        and make it its next input; a row ends on a stop token, at its budget, or when its logits were broken.
        `fed`: these logits came from a decode step, whose input token is now in the cache (the length grows).
        -> the sampled tokens (FAILED_ROW for broken rows; done rows' values mean nothing)."""
        rows = logits.shape[0]
        s = slice(first, first + rows)
        seen = self.seen[s] if self.seen is not None else None
        tokens, broken = sampler(logits, self.settings(first, rows), kind, seen)
        live = ~self.done[s]
        if fed:
            self.lengths[s] += live
        tokens = tokens.masked_fill(broken, FAILED_ROW)
        count = self.count[s]
        column = (count % RING).view(rows, 1)
        board = self.board[s]
        board.scatter_(1, column, torch.where(live, tokens, board.gather(1, column)[:, 0].long()).to(torch.int32)
                       .view(rows, 1))
        count += live
        board[:, RING] = count.to(torch.int32)
        stop = (tokens.view(rows, 1) == self.stops[s]).any(dim=1) | broken | (count >= self.budget[s])
        self.done[s] |= live & stop
        self.next_ids[s, 0] = torch.where(self.done[s], self.pad_token_id, tokens)
        if self.seen is not None:
            self.seen[s].scatter_(1, tokens.clamp(min=0).view(rows, 1), live.view(rows, 1))
        return tokens

    def snapshot(self) -> dict:
        """Copies of what a step changes (graphs.py restores them around the steps it runs to record and check)."""
        return {name: getattr(self, name).clone() for name in self._per_slot()}

    def restore(self, saved: dict) -> None:
        for name, tensor in saved.items():
            getattr(self, name).copy_(tensor)
