"""The dynamic batcher: requests from many clients become one forward pass per decode step.

Route handlers (on the asyncio loop) submit sequences to a bounded queue and read their results from an
asyncio queue of events. One worker thread owns the model: between decode steps it answers pending
classification jobs, admits waiting sequences into the running batch (up to `max_batch`; a new sequence is
prefilled and joins the others, see model/decode/batch.py), runs one decode step for every running sequence, turns
the tokens read back so far into text (the device samples and stops rows itself and its tokens come back every few
steps: the worker never waits for a step, model/decode/readback.py), and retires sequences that finished, hit a stop
string, or whose client went away. A full queue is refused at once (`QueueFull`,
503 with Retry-After): no request waits without bound, and the memory a batch can take is bounded by
max_batch x (prompt limit + max_tokens limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from steadytune.eval.scoring import inference, score_labels
from steadytune.model.decode.adapters import mixes_adapters
from steadytune.model.decode.complete import make_decode_batch
from steadytune.model.decode.prefill import Row
from steadytune.model.decode.readback import Update
from steadytune.model.decode.sampling import SamplingParams, mix_key
from steadytune.serve.text import TextAssembler

logger = logging.getLogger("steadytune.serve")

# Padded prompt tokens one prefill forward may take (rows x longest prompt); at least one sequence always joins.
PREFILL_TOKEN_BUDGET = 32768
OUT_OF_MEMORY = ("out of memory on the device: the batch did not fit; lower --max-batch, --max-prompt-tokens or "
                 "--max-tokens")
NOT_FINITE = ("the model's output for this sequence was not finite (nan or inf): it cannot be sampled; the other "
              "requests are served on")
ROW_ERROR = "internal error while generating this sequence (the server log has the details)"


class QueueFull(Exception):
    """The queue holds `max_queue` waiting sequences; the client should retry after `retry_after` seconds."""

    def __init__(self, retry_after: int = 1):
        super().__init__("the server is busy: its request queue is full")
        self.retry_after = retry_after


class EngineError(Exception):
    """A step failed for the sequences in it; the message is safe to show to clients."""


@dataclass
class Generation:
    """One sequence to generate: choice `index` of a request."""
    index: int
    prompt_ids: list
    adapter: Optional[str]
    params: SamplingParams


# Events a request receives, in order per choice: Delta* then Finished (or Failed for the whole request).
@dataclass
class Delta:
    index: int
    text: str


@dataclass
class Finished:
    index: int
    reason: str              # "stop" | "length"
    completion_tokens: int


@dataclass
class Failed:
    message: str


class Request:
    """A submitted request as its route handler holds it: read `events`; `cancel()` frees its slots."""

    def __init__(self, loop: asyncio.AbstractEventLoop, choices: int):
        self.events: asyncio.Queue = asyncio.Queue()
        self.choices = choices
        self.cancelled = False
        self.failed = False  # one of its sequences failed: the request has its Failed event, the rest are dropped
        self._loop = loop

    def cancel(self) -> None:
        self.cancelled = True  # read by the worker before its next step

    def post(self, events: list) -> None:
        """From the worker thread: hand events to the loop that reads them."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self.put, events)

    def put(self, events: list) -> None:
        """From the loop's own thread."""
        for event in events:
            self.events.put_nowait(event)


@dataclass
class _Sequence:
    generation: Generation
    request: Request
    assembler: TextAssembler
    key: int                 # the noise its tokens are drawn from (sampling.py): from its seed, else random
    submitted: float = field(default_factory=time.perf_counter)
    generated: int = 0
    done: bool = False
    broken: bool = False     # its keys and values may hold nan: its slot is cleared before anyone else uses it


@dataclass
class _ClassifyJob:
    adapter: Optional[str]
    prompts: list
    label_targets: list
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class _ExclusiveJob:
    """Work that needs the model alone, run on the worker thread between two decode steps (serve/media.py's
    generation with images)."""
    adapter: Optional[str]
    work: Callable[[], Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class EngineStats:
    """Counters the metrics endpoint reads."""
    generated_tokens: int = 0
    prompt_tokens: int = 0
    steps: int = 0
    step_rows: int = 0                 # rows over all forwards (mean batch = step_rows / steps)
    cancelled: int = 0                 # sequences dropped because their client went away
    rejected: int = 0                  # sequences refused with 503
    failed: int = 0
    classified: int = 0
    recent: deque = field(default_factory=deque)  # (monotonic time, tokens) per step, last 60 s

    def record(self, tokens: int, rows: int) -> None:
        """Tokens that came back now, and the rows of the decode step run now (0: none ran)."""
        now = time.monotonic()
        self.generated_tokens += tokens
        self.steps += rows > 0
        self.step_rows += rows
        self.recent.append((now, tokens))
        while self.recent and self.recent[0][0] < now - 60:
            self.recent.popleft()

    def tokens_per_second(self, window: float = 10.0) -> float:
        now = time.monotonic()
        recent = list(self.recent)
        return sum(n for t, n in recent if t >= now - window) / window


class BatchingEngine:
    """Transformers + peft behind a bounded queue and one worker thread (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, max_batch: int = 32, max_queue: int = 128,
                 classify_batch_size: int = 32):
        self.model = model
        self.tokenizer = tokenizer
        # Route handlers encode on the loop's thread while the worker decodes. A fast tokenizer's first encode may
        # reset its truncation/padding state (a mutable borrow in `tokenizers`, which a concurrent decode turns into
        # "Already borrowed"); one encode now settles that state before the worker starts.
        tokenizer("a", add_special_tokens=False)
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.classify_batch_size = classify_batch_size
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.batch = make_decode_batch(model, pad if pad is not None else 0, max_rows=max_batch)
        # peft's mixed-adapter batches cover neither DoRA nor expert LoRA (target_parameters): then a batch holds one
        # adapter (or the base model) at a time.
        self.mixed_adapters = mixes_adapters(model)
        self.stats = EngineStats()
        self._waiting: deque[_Sequence] = deque()
        self._classify: list[_ClassifyJob] = []
        self._exclusive: list[_ExclusiveJob] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self.on_first_token: Callable[[float], None] = lambda seconds: None  # metrics hook

    # --- life cycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="steadytune-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    @property
    def queue_depth(self) -> int:
        return len(self._waiting) + len(self._classify) + len(self._exclusive)

    @property
    def running(self) -> int:
        return len(self.batch)

    # --- the loop side ----------------------------------------------------------------------------------
    def submit(self, generations: list[Generation], loop: asyncio.AbstractEventLoop) -> Request:
        """Queue every sequence of one request, or none (QueueFull)."""
        request = Request(loop, len(generations))
        with self._cond:
            self._drop_cancelled_waiting()
            if self._stopping or len(self._waiting) + len(generations) > self.max_queue:
                self.stats.rejected += len(generations)
                raise QueueFull()
            for g in generations:
                assembler = TextAssembler(self.tokenizer, g.params.stop, g.prompt_ids)
                key = mix_key(g.params.seed) if g.params.seed is not None else secrets.randbits(63)
                self._waiting.append(_Sequence(g, request, assembler, key))
                self.stats.prompt_tokens += len(g.prompt_ids)
            self._cond.notify()
        return request

    async def classify(self, adapter: Optional[str], prompts: list, label_targets: list) -> torch.Tensor:
        """-> [len(prompts), n_labels] summed log-probabilities of each label (scoring.score_labels)."""
        loop = asyncio.get_running_loop()
        job = _ClassifyJob(adapter, prompts, label_targets, loop.create_future(), loop)
        return await self._enqueue(self._classify, job)

    async def run_exclusive(self, adapter: Optional[str], work: Callable[[], Any]) -> Any:
        """work() on the worker thread, with `adapter` selected, between two decode steps; -> its result."""
        loop = asyncio.get_running_loop()
        job = _ExclusiveJob(adapter, work, loop.create_future(), loop)
        return await self._enqueue(self._exclusive, job)

    def _enqueue(self, queue: list, job) -> asyncio.Future:
        """`job` put on `queue` for the worker thread (QueueFull while stopping or full); -> the future it answers."""
        with self._cond:
            if self._stopping or self.queue_depth >= self.max_queue:
                self.stats.rejected += 1
                raise QueueFull()
            queue.append(job)
            self._cond.notify()
        return job.future

    def _drop_cancelled_waiting(self) -> None:
        if any(s.request.cancelled or s.request.failed for s in self._waiting):
            kept = deque(s for s in self._waiting if not (s.request.cancelled or s.request.failed))
            self.stats.cancelled += sum(s.request.cancelled and not s.request.failed for s in self._waiting)
            self.stats.failed += sum(s.request.failed for s in self._waiting)
            self._waiting = kept

    # --- the worker thread --------------------------------------------------------------------------------
    def _work(self) -> None:

        with inference(self.model):
            while True:
                with self._cond:
                    while not (self._waiting or self._classify or self._exclusive or self.batch.rows
                               or self._stopping):
                        self._cond.wait()
                    if self._stopping:
                        break
                    jobs, self._classify = self._classify, []
                    exclusive, self._exclusive = self._exclusive, []
                    admitted = self._admit()
                if jobs:
                    self._run_classify(jobs)
                if exclusive:
                    self._run_exclusive(exclusive)
                try:
                    self._step(admitted)
                except Exception as e:  # the server stays up; the sequences of this step fail
                    self._fail_step(admitted, e)
        self._fail_waiting("the server is shutting down")

    def _admit(self) -> list[_Sequence]:
        """Waiting sequences that join the batch now, oldest first (called under the lock)."""
        self._drop_cancelled_waiting()
        if not self._waiting or not self.batch.can_admit():
            return []
        free = self.max_batch - len(self.batch)
        adapter = None
        if not self.mixed_adapters:  # one adapter per batch: the running one, else the oldest waiting one's
            adapter = self.batch.rows[0].adapter if self.batch.rows else self._waiting[0].generation.adapter
        chosen, skipped, longest = [], deque(), 0
        while self._waiting and len(chosen) < free:
            seq = self._waiting.popleft()
            if not self.mixed_adapters and seq.generation.adapter != adapter:
                skipped.append(seq)
                continue
            width = max(longest, len(seq.generation.prompt_ids))
            if chosen and (len(chosen) + 1) * width > PREFILL_TOKEN_BUDGET:
                self._waiting.appendleft(seq)
                break
            chosen.append(seq)
            longest = width
        self._waiting.extendleft(reversed(skipped))
        return chosen

    def _step(self, admitted: list[_Sequence]) -> None:
        posts: dict[Request, list] = defaultdict(list)
        try:
            if admitted:
                self.batch.add([Row(s.generation.prompt_ids, s.generation.adapter, owner=s, params=s.generation.params,
                                    key=s.key) for s in admitted])
            if self.batch.rows:
                stepping = self.batch.needs_step()
                if stepping:
                    self.batch.step()
                # With nothing left to compute, wait for what is still on its way back.
                updates = self.batch.poll(wait=not stepping)
                self.stats.record(sum(len(u.tokens) for u in updates), len(self.batch.rows) if stepping else 0)
                self._take(updates, posts)
                self._retire()
        finally:
            for request, events in posts.items():
                request.post(events)

    def _take(self, updates: list[Update], posts: dict) -> None:
        """Turn each row's tokens read back into text, a stop, or the end of its budget."""
        for update in updates:
            seq = update.row.owner
            events = posts[seq.request]
            if seq.done:
                continue
            if update.finished == "failed":
                seq.broken = True
                self._fail_sequence(seq, NOT_FINITE, events)
                logger.warning("serve: a sequence's logits were not finite; that request failed, the batch goes on")
                continue
            try:
                for token in update.tokens:
                    self._take_token(seq, token, events)
                    if seq.done:
                        break
            except Exception:  # one row's text (its tokens, its stop strings): that request fails, no other
                logger.exception("serve: a sequence failed while its text was assembled")
                self._fail_sequence(seq, ROW_ERROR, events)

    def _take_token(self, seq: _Sequence, token: int, events: list) -> None:
        seq.generated += 1
        if seq.generated == 1:
            self.on_first_token(time.perf_counter() - seq.submitted)
        params = seq.generation.params
        if token in params.stop_token_ids and not params.ignore_eos:
            self._finish(seq, seq.assembler.finish(), "stop", events)
            return
        piece = seq.assembler.add(token)
        if seq.assembler.stopped:
            self._finish(seq, piece, "stop", events)
        elif seq.generated >= params.max_tokens:
            self._finish(seq, piece + seq.assembler.finish(), "length", events)
        elif piece:
            events.append(Delta(seq.generation.index, piece))

    def _fail_sequence(self, seq: _Sequence, message: str, events: list) -> None:
        """This sequence fails, and with it its request (its other choices leave the batch at the next retire)."""
        seq.done = True
        self.stats.failed += 1
        if not seq.request.failed:
            seq.request.failed = True
            events.append(Failed(message))

    @staticmethod
    def _finish(seq: _Sequence, piece: str, reason: str, events: list) -> None:
        if piece:
            events.append(Delta(seq.generation.index, piece))
        events.append(Finished(seq.generation.index, reason, seq.generated))
        seq.done = True

    def _retire(self) -> None:
        keep, broken = [], []
        for i, row in enumerate(self.batch.rows):
            seq = row.owner
            if seq.broken:
                broken.append(i)
            if seq.done:
                continue
            if seq.request.failed:
                self.stats.failed += 1
                continue
            if seq.request.cancelled:
                self.stats.cancelled += 1
                continue
            keep.append(i)
        if broken:
            self.batch.clear(broken)
        self.batch.keep(keep)

    def _fail_step(self, admitted: list[_Sequence], error: Exception) -> None:
        if isinstance(error, torch.OutOfMemoryError):
            message = OUT_OF_MEMORY
            logger.error("serve: %s", message)
        else:
            message = "internal error while generating (the server log has the details)"
            logger.exception("serve: a decode step failed")
        requests = {row.owner.request for row in self.batch.rows} | {s.request for s in admitted}
        self.stats.failed += len(self.batch.rows) + len(admitted)
        self.batch.keep([])
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        for request in requests:
            request.post([Failed(message)])

    def _fail_waiting(self, message: str) -> None:
        with self._cond:
            waiting, self._waiting = self._waiting, deque()
            jobs, self._classify = self._classify, []
            exclusive, self._exclusive = self._exclusive, []
        for request in {s.request for s in waiting}:
            request.post([Failed(message)])
        for job in [*jobs, *exclusive]:
            job.loop.call_soon_threadsafe(_set_exception, job.future, EngineError(message))

    # --- exclusive jobs -------------------------------------------------------------------------------------
    def _run_exclusive(self, jobs: list[_ExclusiveJob]) -> None:
        for job in jobs:
            try:
                with self.batch.adapter_selected(job.adapter):
                    result = job.work()
            except Exception as e:
                error = EngineError(OUT_OF_MEMORY if isinstance(e, torch.OutOfMemoryError)
                                    else "internal error while generating (the server log has the details)")
                if not isinstance(e, torch.OutOfMemoryError):
                    logger.exception("serve: a request with images failed")
                job.loop.call_soon_threadsafe(_set_exception, job.future, error)
                continue
            job.loop.call_soon_threadsafe(_set_result, job.future, result)

    # --- classification -------------------------------------------------------------------------------------
    def _run_classify(self, jobs: list[_ClassifyJob]) -> None:
        """Jobs for the same model are scored together, in batches of classify_batch_size prompts."""

        groups: dict[tuple, list[_ClassifyJob]] = defaultdict(list)
        for job in jobs:
            groups[(job.adapter, id(job.label_targets))].append(job)
        for (adapter, _), group in groups.items():
            prompts = [p for job in group for p in job.prompts]
            try:
                with self.batch.adapter_selected(adapter):
                    scores = score_labels(self.model, prompts, group[0].label_targets, self.classify_batch_size,
                                          self.batch.pad_token_id)
            except Exception as e:
                error = EngineError(OUT_OF_MEMORY if isinstance(e, torch.OutOfMemoryError)
                                    else "internal error while classifying (the server log has the details)")
                if not isinstance(e, torch.OutOfMemoryError):
                    logger.exception("serve: classification failed")
                for job in group:
                    job.loop.call_soon_threadsafe(_set_exception, job.future, error)
                continue
            self.stats.classified += len(prompts)
            start = 0
            for job in group:
                part = scores[start:start + len(job.prompts)]
                start += len(job.prompts)
                job.loop.call_soon_threadsafe(_set_result, job.future, part)


def _set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
