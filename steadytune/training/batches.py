"""Deterministic micro-batches for the training loop.

Epoch e's order is a permutation seeded by (seed, e), so a resumed run sees exactly the batches the uninterrupted run
would have seen, from (epoch, batch index) alone, and every rank computes its own share without talking to the others.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
from dataclasses import dataclass, field

import torch

from steadytune.config import RunConfig
from steadytune.data import balance
from steadytune.data.balance import label_token_weights, make_sampler
from steadytune.data.collators import PadCollator
from steadytune.data.packing import PackedCollator, group_by_token_budget, static_shape_for, targets_of
from steadytune.errors import UserError


@dataclass
class MicroBatch:
    batch: dict
    n_input_tokens: int                 # real (non-pad) tokens, for throughput
    next_position: tuple[int, int]      # (epoch, batch index) of the micro-batch after this one
    ids: list[int] = field(default_factory=list)  # training-example indices (guard events name bad batches)


class TrainBatches:
    """Deterministic micro-batches: epoch e's order is a permutation seeded by (seed, e), so a resumed run
    sees exactly the batches the uninterrupted run would have seen, from (epoch, batch index) alone.

    Two ways to cut that order into micro-batches:
    - fixed size (the default, packed or not): global batches of per_device_train_batch_size x world examples,
      each rank taking its slice; packing lays a micro-batch out as packed rows instead of padded ones, the same
      examples either way, so a step holds what LLaMA-Factory's does;
    - token budget (max_tokens_per_batch, or packing: true asked for): consecutive examples of the order grouped up
      to the budget of real tokens (packing.group_by_token_budget), consecutive groups dealt to the ranks in turn.
    The same order and budget give the same groups packed or padded, so packing changes nothing but speed.

    One process cuts an epoch as transformers' Trainer does (LLaMA-Factory's steps): a last micro-batch with the
    examples left over, and a last optimizer step with the micro-batches left over (`take_window`). Several
    processes keep whole steps (`whole_steps`), so that any number of them cuts the same steps."""

    def __init__(self, cfg: RunConfig, data, tokenizer, world_size: int = 1, rank: int = 0,
                 packing_attention: str | None = None, max_tokens: int | None | str = "auto", collate=None,
                 token_mask: bool = False):


        self.cfg, self.data = cfg, data
        self.world_size, self.rank = world_size, rank
        self.global_batch = cfg.train.per_device_train_batch_size * world_size
        self.accumulation = cfg.train.gradient_accumulation_steps
        self.collate = PadCollator(tokenizer.pad_token_id, padding_side="right")
        # Class balance (seed 003: a 55% majority class drove the loss up). The sampler draws each class about
        # equally often; the loss weights scale each example's label tokens by its class's inverse frequency.
        mode = cfg.data.class_balance if data.label_names else "none"
        self.label_ids = [x["label_id"] for x in data.train] if mode != "none" else []
        self.balanced_sampling = balance.uses_sampler(mode)
        self.loss_weights = None
        if balance.uses_loss_weights(mode):
            counts = [0] * len(data.label_names)
            for label in self.label_ids:
                counts[label] += 1
            self.loss_weights = balance.class_weights(counts)
        if packing_attention is not None:
            # token_mask: packed rows also say which positions are padding (segment_ids -1), for a mixture of
            # experts' routing statistics and load-balancing loss (model/moe/routing.py)
            self.collate = PackedCollator(tokenizer.pad_token_id, row_len=cfg.data.cutoff_len,
                                          attention=packing_attention, segment_ids=token_mask)
        if collate is not None:  # a stage's own collation (preference pairs: stages/batches.py)
            self.collate = collate
        self.lengths = [len(x["input_ids"]) for x in data.train]
        if max_tokens == "auto":  # the recipe passes the budget it recorded; tests and tools let it be derived
            max_tokens, _ = token_budget(cfg.train, self.lengths,
                                         packing_asked=packing_attention is not None and packing_asked(cfg.data))
        self.max_tokens = max_tokens
        self.static_shape = None
        # micro-batches made ahead in a thread (a vision-language run's pixels: training/vision_speed.py); 0: none
        self.prefetch = 0
        self.pin = False   # and their tensors copied to pinned memory there (a CUDA run)
        self._epoch_groups: tuple[int, list[list[int]]] | None = None

    def static_shape_for(self, epochs: int):
        """The smallest packing.StaticShape that holds every packed micro-batch of the first `epochs` epochs."""

        groups = [g for epoch in range(epochs) for g in self.micro_batches(epoch)]
        if hasattr(self.collate, "static_shape_for"):  # a stage's collator (preference pairs) knows its sequences
            return self.collate.static_shape_for(self.data.train, groups)
        targets = [targets_of(x) for x in self.data.train]
        return static_shape_for(groups, self.lengths, targets, self.collate.attention, self.collate.row_len)

    def use_static_shape(self, shape) -> None:
        """Pad every packed micro-batch to `shape` from now on, so compiled layers and CUDA graphs see one shape."""

        packed = self.collate
        self.static_shape = shape
        if hasattr(packed, "with_static"):  # a stage's collator pads its own packed rows
            self.collate = packed.with_static(shape)
            return
        self.collate = PackedCollator(packed.pad_token_id, packed.row_len, packed.attention,
                                      segment_ids=packed.segment_ids, static=shape)

    def batches_per_epoch(self) -> int:
        if self.max_tokens is None:
            if self.world_size == 1:
                return math.ceil(len(self.data.train) / self.global_batch)
            return self.whole_steps(len(self.data.train) // self.global_batch)
        return len(self.micro_batches(0))

    def whole_steps(self, count: int) -> int:
        """Several processes: an epoch's micro-batches cut to whole optimizer steps (world x accumulation micro-batches
        each), so that a step never straddles two epochs and the same steps come out on any number of processes (a
        resume on another world size relies on it: distributed/world_resume.py). Fewer micro-batches than one step:
        keep them all. One process keeps every micro-batch (its last step of an epoch may be short, as in
        transformers' Trainer)."""
        if self.world_size == 1:
            return count
        whole = count - count % self.accumulation
        return whole if whole > 0 else max(1, count)

    def order(self, epoch: int) -> list[int]:
        seed = self.cfg.train.seed * 1000 + epoch
        if self.balanced_sampling:
            return list(make_sampler(self.label_ids, seed))
        generator = torch.Generator().manual_seed(seed)
        return torch.randperm(len(self.data.train), generator=generator).tolist()

    def micro_batches(self, epoch: int) -> list[list[int]]:
        """This rank's micro-batches (example indices) of `epoch`, a pure function of (seed, epoch)."""
        if self._epoch_groups is not None and self._epoch_groups[0] == epoch:
            return self._epoch_groups[1]
        order = self.order(epoch)
        if self.max_tokens is None:
            g = self.global_batch
            # One process keeps the examples left over as a smaller last micro-batch (a data loader's drop_last=False)
            count = math.ceil(len(order) / g) if self.world_size == 1 else self.whole_steps(len(order) // g)
            mine = [order[b * g:(b + 1) * g][self.rank::self.world_size] for b in range(count)]
        else:
            groups = group_by_token_budget(self.lengths, order, self.max_tokens)
            # Every rank runs the same number of micro-batches (DDP steps together); a short tail is dropped.
            count = self.whole_steps(len(groups) // self.world_size)
            mine = [groups[(b * self.world_size + self.rank) % len(groups)] for b in range(count)]
        self._epoch_groups = (epoch, mine)
        return mine

    def stream(self, epoch: int = 0, start_batch: int = 0):
        """The micro-batches from (epoch, start_batch) on, for ever; made `prefetch` ahead in a thread when set."""
        made = self._made(epoch, start_batch)
        return Prefetched(made, self.prefetch, self.pin) if self.prefetch > 0 else made

    def _made(self, epoch: int, start_batch: int):
        while True:
            micro_batches = self.micro_batches(epoch)
            n = len(micro_batches)
            for b in range(start_batch, n):
                indices = micro_batches[b]
                examples = [self.data.train[i] for i in indices]
                batch = self.collate(examples)
                if self.loss_weights is not None:
                    batch["token_weights"] = label_token_weights(batch, self.loss_weights)
                next_position = (epoch, b + 1) if b + 1 < n else (epoch + 1, 0)
                yield MicroBatch(batch, sum(len(e["input_ids"]) for e in examples), next_position, list(indices))
            epoch, start_batch = epoch + 1, 0


class Prefetched:
    """An iterator over `source` whose items a thread makes `depth` ahead, so that making them (a vision-language
    run's images decoded and processed: ~10 ms an image on one core) overlaps the GPU's work on the one before instead
    of following it. The order is the source's; an error in the thread is raised where the item would have come.
    `pin`: tensors copied to pinned memory in the thread too (a pageable copy to the GPU would wait for it to idle).
    Dropped (a rollback restarts the stream), it stops making items."""

    def __init__(self, source, depth: int, pin: bool = False):
        self._items: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        # the thread holds the queue and the event, not this object: dropped, it is collected and stops the thread
        threading.Thread(target=_fill, args=(source, pin, self._items, self._stop), daemon=True,
                         name="steadytune-prefetch").start()

    def __iter__(self):
        return self

    def __next__(self):
        ok, item = self._items.get()
        if not ok:
            raise item
        return item

    def close(self) -> None:
        self._stop.set()

    def __del__(self):
        self._stop.set()


def _fill(source, pin: bool, items: queue.Queue, stop: threading.Event) -> None:
    """Prefetched's thread: items of `source` into `items` until `stop` is set."""
    def put(entry) -> bool:
        while not stop.is_set():
            try:
                items.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in source:
            if pin:
                item.batch = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in item.batch.items()}
            if not put((True, item)):
                return
    except BaseException as error:   # handed to the consumer, raised there
        put((False, error))


def packing_asked(d) -> bool:
    """Whether the config asks for packing (`packing: true` or `neat_packing`), not merely gets it by default.
    `d`: the data section."""
    return bool(d.packing or d.neat_packing)


def uses_token_budget(cfg: RunConfig, packing) -> bool:
    """Whether micro-batches are cut by a token budget (see token_budget) rather than by a number of examples.
    `packing`: the run's model.attention.PackingPlan, or None when it does not pack."""
    return cfg.train.max_tokens_per_batch is not None or (packing is not None and packing.by_tokens)


def token_budget(t, lengths: list[int], packing_asked: bool,
                 asked: bool = True) -> tuple[int | None, str | None]:
    """(real tokens per micro-batch, why), or (None, None) for micro-batches of per_device_train_batch_size
    examples. `t`: the train section. `packing_asked`: the micro-batches are cut by tokens (uses_token_budget);
    `asked`: because the config asks for packing (else: packed by default on a CUDA GPU).

    Without a budget given: per_device_train_batch_size x the mean example length, so a step holds about as many
    tokens as unpacked. Packing on by default on a CPU keeps the examples per micro-batch instead (and so
    LLaMA-Factory's steps): nothing there reuses a static shape. LLaMA-Factory's own packing, rows of cutoff_len, is
    max_tokens_per_batch = per_device_train_batch_size x cutoff_len."""
    if t.max_tokens_per_batch is not None:
        return t.max_tokens_per_batch, "max_tokens_per_batch was set"
    if not packing_asked:
        return None, None
    mean = sum(lengths) / max(len(lengths), 1)
    budget = max(1, math.ceil(t.per_device_train_batch_size * mean))
    split = (f"per_device_train_batch_size {t.per_device_train_batch_size} x mean example length {mean:.1f} tokens "
             "per micro-batch, so the number of examples per step varies")
    if asked:
        return budget, f"packing: true: {split}"
    # Measured on an H200 (the GPU-sized demo, 15,627 reviews, batch 32): micro-batches of 32 examples varied so much
    # in tokens that one static shape would waste 26% of the compute, so no compiled layers and no CUDA graphs, and
    # the run had not finished after 285 s; cut by this budget: one static shape, 996 steps in 53 s, accuracy 0.876.
    return budget, (f"packed by default on a GPU: {split}; one static shape then fits every micro-batch, which "
                    "compiled layers and CUDA graphs need (a fixed number of examples varies too much in tokens)")


def take_window(stream, accumulation: int) -> list[MicroBatch]:
    """The micro-batches of one optimizer step: `accumulation` of them, or fewer at the end of an epoch (the last step
    of an epoch takes what is left, as transformers' Trainer does, so steps never straddle two epochs)."""
    window = []
    for _ in range(accumulation):
        micro_batch = next(stream)
        window.append(micro_batch)
        if micro_batch.next_position[1] == 0:
            break
    return window


class Windows:
    """The optimizer steps' windows of a micro-batch stream, one at a time, with a look at the next one before it is
    taken: what a stage that prepares a step ahead needs (grpo's asynchronous roll-outs generate the next step's
    completions while this step trains). `peek` returns the very MicroBatch objects `take` returns next, so what
    the stage fills in ahead is what the step then trains on."""

    def __init__(self, stream, accumulation: int):
        self.stream, self.accumulation = stream, accumulation
        self._next: list[MicroBatch] | None = None

    def take(self) -> list[MicroBatch]:
        window = self.peek()
        self._next = None
        return window

    def peek(self) -> list[MicroBatch]:
        if self._next is None:
            self._next = take_window(self.stream, self.accumulation)
        return self._next

    def close(self) -> None:
        """Stop the stream (a prefetching one stops making micro-batches)."""
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class StepCount:
    micro_batches_per_epoch: int
    steps_per_epoch: int
    total: int


def count_steps(t, micro_batches_per_epoch: int) -> StepCount:
    """Optimizer steps from an epoch's micro-batches (`t`: the train section): ceil(micro-batches / accumulation) an
    epoch (the last one short when they do not divide), ceil(epochs x that) in all, or max_steps when set."""
    per_epoch = max(1, math.ceil(micro_batches_per_epoch / t.gradient_accumulation_steps))
    total = t.max_steps if t.max_steps > 0 else max(1, math.ceil(per_epoch * t.num_train_epochs))
    return StepCount(micro_batches_per_epoch, per_epoch, total)


def lf_step_count(examples: int, per_device: int, world: int, accumulation: int, epochs: float,
                  max_steps: int) -> StepCount:
    """What LLaMA-Factory (transformers' Trainer.set_initial_training_values) makes of `examples` training rows: a
    data loader of ceil(rows per process / batch) micro-batches (drop_last off; a distributed sampler pads the rows to
    a multiple of the processes), ceil(micro-batches / accumulation) steps an epoch, ceil(epochs x that) in all, or
    max_steps when it is set (tests/golden/lf_fidelity.json holds its numbers for its examples)."""
    per_process = math.ceil(examples / world)
    micro_batches = math.ceil(per_process / per_device)
    per_epoch = max(micro_batches // accumulation + int(micro_batches % accumulation > 0), 1)
    total = max_steps if max_steps > 0 else math.ceil(epochs * per_epoch)
    return StepCount(micro_batches, per_epoch, total)


def warmup_steps_of(t, total_steps: int) -> int:
    """transformers' TrainingArguments.get_warmup_steps: warmup_steps when set, else ceil(total x warmup_ratio)."""
    return t.warmup_steps if t.warmup_steps > 0 else math.ceil(total_steps * t.warmup_ratio)


def to_device(batch: dict, device) -> dict:
    """Tensors to `device`. To a GPU through pinned memory: a copy from pageable memory waits until the GPU has
    finished everything queued, which would stall the CPU once per micro-batch."""
    pin = torch.device(device).type == "cuda"
    return {k: ((v.pin_memory() if pin and v.device.type == "cpu" else v).to(device, non_blocking=True)
                if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def compare_with_lf(micro_batches: int, per_epoch: int, total: int, lf, budget: int | None) -> str:
    """The step count next to LLaMA-Factory's for the same rows and keys (a difference says why, with numbers)."""
    if (micro_batches, per_epoch, total) == (lf.micro_batches_per_epoch, lf.steps_per_epoch, lf.total):
        return "the same as LLaMA-Factory's"
    why = (f"micro-batches of {budget:,} tokens instead of a number of examples" if budget is not None else
           "several processes keep whole steps in every epoch")
    return (f"differs from LLaMA-Factory: {micro_batches:,} micro-batches and {total:,} steps here, "
            f"{lf.micro_batches_per_epoch:,} micro-batches and {lf.total:,} steps there ({why})")


def check_steps_fit_keys(cfg: RunConfig, micro_batches_per_epoch: int, total_steps: int) -> None:
    """Keys that would silently misbehave with this many steps: accumulation over an epoch's end (warned), a
    fault injected after the last step or a hang with the watchdog off (errors)."""
    t, f = cfg.train, cfg.fault_injection
    if t.gradient_accumulation_steps > micro_batches_per_epoch:
        message = (f"gradient_accumulation_steps {t.gradient_accumulation_steps} is more than the "
                   f"{micro_batches_per_epoch} micro-batches of an epoch: every optimizer step spans more than one "
                   "epoch (lower it, or raise the data)")
        print(f"warning: {message}", file=sys.stderr, flush=True)
        cfg.decide("gradient_accumulation_steps", t.gradient_accumulation_steps, message)
    if f.hang_step is not None and t.hang_timeout == 0:
        raise UserError("fault_injection.hang_step is set but hang_timeout: 0 turns the hang watchdog off: the run "
                        "would hang for ever; set hang_timeout (e.g. 30)")
    for key in ("nan_loss_step", "inf_loss_step", "spike_loss_step", "fp16_overflow_step", "lr_spike_start",
                "hang_step", "kill_step", "oom_step"):
        step = getattr(f, key)
        if step is not None and step > total_steps:
            raise UserError(f"fault_injection.{key}: step {step} is beyond the run's {total_steps} steps; the fault "
                            "would never fire")


@dataclass
class Steps:
    """How the data is cut into optimizer steps."""
    micro_batches_per_epoch: int
    per_epoch: int
    total: int
    warmup: int


def plan_steps(cfg: RunConfig, micro_batches_per_epoch: int, examples: int, world: int,
               budget: int | None) -> Steps:
    """Optimizer steps and warm-up from an epoch's micro-batches, each recorded with its reason (the total beside
    LLaMA-Factory's for the same `examples` rows on `world` processes); keys that would misbehave with them are
    refused or warned about here."""
    t = cfg.train
    steps = count_steps(t, micro_batches_per_epoch)
    per_epoch, total = steps.steps_per_epoch, steps.total
    warmup = warmup_steps_of(t, total)
    lf = lf_step_count(examples, t.per_device_train_batch_size, world, t.gradient_accumulation_steps,
                       t.num_train_epochs, t.max_steps)
    cfg.decide("total_steps", total, f"{'max_steps' if t.max_steps > 0 else 'num_train_epochs'}: "
               f"{micro_batches_per_epoch} micro-batches per epoch / {t.gradient_accumulation_steps} accumulation = "
               f"{per_epoch} steps per epoch; "
               + compare_with_lf(micro_batches_per_epoch, per_epoch, total, lf, budget))
    cfg.decide("warmup_steps", warmup, "warmup_steps" if t.warmup_steps > 0 else
               f"ceil({t.warmup_ratio} x {total} steps), as transformers rounds it for LLaMA-Factory")
    check_steps_fit_keys(cfg, micro_batches_per_epoch, total)
    return Steps(micro_batches_per_epoch, per_epoch, total, warmup)
