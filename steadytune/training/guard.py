"""Numerical guard: catch non-finite values and loss / grad-norm spikes once per optimizer step, and recover.

The loop calls, per optimizer step, after backward and gradient clipping but *before* `optimizer.step()`:

    decision = guard.inspect(step, loss, grad_norm, batch_ids)
    if decision.apply_update:  optimizer.step() ...             # ok | warn
    elif decision.action == SKIP:  drop this batch's gradients  # the update is never applied
    elif decision.action == ROLLBACK:  step = guard.restore(state)   # last good state, lower LR, tighter clip
    elif decision.action == ABORT:  restore, save a checkpoint, raise guard.abort_error(decision)

and, after each applied update, `guard.maybe_snapshot(step, state)` keeps an in-memory copy of the good state
every `snapshot_steps` steps (trainable weights, optimizer, scheduler, RNG, data position).

Why check before the update: a NaN/inf loss, an inf gradient or a 1000x loss is visible before it does
harm, so it is never applied. A too-large learning rate is not: its update looks normal and the damage shows
one step later as a loss spike. So under `rollback` an isolated anomaly first only drops its batch (cheap,
and the weights are still good); if another anomaly follows within `snapshot_steps` steps, the weights
themselves are suspect and the guard rolls back to a snapshot taken at least TRUST_STEPS steps before the
first anomaly of the episode (a snapshot right after a harmful update would be bad itself), lowers the learning
rate and tightens clipping (seed 000: max_grad_norm 1.0 -> 0.5 -> 0.3).

With fp16, an inf gradient is what dynamic loss scaling expects now and then: the scaler skips that step and
halves its scale. The guard counts these overflows; when they keep coming (`max_fp16_overflows` within the
last `window` steps) it rolls back and asks the loop to continue in bf16 where the GPU supports it, else fp32.

Policies (`guard_policy`): off (no checks at all: the baseline for measuring the guard's cost), warn (log
only), skip, rollback (default), abort (save the last good state and exit with code 3).
"""

from __future__ import annotations

import copy
import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

import torch

from steadytune.errors import UserError
from steadytune.training.checkpoint import capture_rng, restore_rng

OK, WARN, SKIP, ROLLBACK, ABORT = "ok", "warn", "skip", "rollback", "abort"

# Anomaly kinds, as written in metrics.jsonl.
NONFINITE_LOSS = "nonfinite_loss"
NONFINITE_GRAD = "nonfinite_grad_norm"
LOSS_SPIKE = "loss_spike"
GRAD_SPIKE = "grad_norm_spike"
FP16_OVERFLOW = "fp16_overflow"

EXIT_GUARD_ABORT = 3

# A snapshot is trusted for a rollback only if it is this many steps older than the anomaly. Measured on the
# tiny model with a 100x learning rate: the first bad update left the next loss normal and the harm showed
# only after the second, so "one step before" is not enough.
TRUST_STEPS = 3
# An adapter's weights up to this many bytes are snapshotted on their device. LoRA on every expert of a mixture of
# experts passes it by far (Qwen3-30B-A3B, r 8: 1.2 GiB of weights, 3.6 GiB with AdamW's moments, two snapshots
# kept): those snapshots go to host memory, a copy every snapshot_steps steps, so the card holds none of them.
SNAPSHOT_ON_DEVICE_BYTES = 256 * 2**20


class GuardAbort(UserError):
    """The guard stopped the run (policy abort, or too many rollbacks); the last good state was saved."""

    exit_code = EXIT_GUARD_ABORT


@dataclass
class Decision:
    """What the loop should do with the current optimizer step, and why."""

    action: str                               # ok | warn | skip | rollback | abort
    step: int
    kind: str = ""                            # one of the anomaly kinds above, empty when ok
    reason: str = ""
    values: dict = field(default_factory=dict)
    batch_ids: list = field(default_factory=list)
    new_precision: Optional[str] = None       # set when fp16 overflows force a switch (with a rollback)

    @property
    def apply_update(self) -> bool:
        return self.action in (OK, WARN)


@dataclass
class LiveObjects:
    """The live objects a snapshot copies and a rollback writes back into. `data_position` is the loop's own
    record of where the data iterator is (e.g. {"epoch": 1, "batch_in_epoch": 37}); a rollback replaces it."""

    model: torch.nn.Module
    optimizer: Any
    scheduler: Any = None
    scaler: Any = None                         # torch.amp.GradScaler under fp16, else None
    data_position: dict = field(default_factory=dict)


@dataclass
class Snapshot:
    step: int
    weights: dict[str, torch.Tensor]
    optimizer: dict
    scheduler: Optional[dict]
    scaler: Optional[dict]
    rng: dict
    data_position: dict
    lr_scale: float                            # the guard's LR scale when this snapshot was taken


class NumericalGuard:
    """Per-step checks, rolling statistics, snapshots and recovery; see the module docstring for the protocol."""

    def __init__(self, args, precision: str = "fp32", emit: Optional[Callable[[dict], None]] = None,
                 max_grad_norm: float = 1.0, fallback_precision: str = "fp32", keep_snapshots: int = 2,
                 judge_loss_spikes: bool | None = None, judge_grad_spikes: bool = True):
        self.args = args
        self.policy: str = args.guard_policy
        # None: the loss_spikes key, on unless it says false (train decides it per stage: judge_loss_spikes)
        self.judge_loss_spikes = (args.loss_spikes is not False) if judge_loss_spikes is None else judge_loss_spikes
        self.judge_grad_spikes = judge_grad_spikes   # off for grpo (train.judge_grad_spikes says why)
        self.precision = precision
        self.fallback_precision = fallback_precision
        self.emit = emit or (lambda event: None)
        self.max_grad_norm = float(max_grad_norm)    # what the loop clips to now; tightened by rollbacks
        self.lr_scale = 1.0                          # product of back-offs so far
        self.rollbacks = 0
        self.consecutive_skips = 0
        self.counts: Counter = Counter()             # "kind:action" -> n
        self.events: list[dict] = []
        self.loss_history: deque = deque(maxlen=args.window)       # (step, value) of accepted steps
        self.grad_history: deque = deque(maxlen=args.window)
        self.overflow_steps: deque = deque()
        self.offending: dict[tuple, int] = {}        # batch ids -> step: skipped once when replayed
        self.snapshots: deque[Snapshot] = deque(maxlen=max(1, keep_snapshots))
        self._restore_target: Optional[Snapshot] = None
        self.episode_start: Optional[int] = None     # first step of the current run of nearby anomalies
        self.last_anomaly_step: Optional[int] = None
        self._last_restored_step: Optional[int] = None

    # ------------------------------------------------------------------ detection

    @property
    def enabled(self) -> bool:
        return self.policy != "off"

    @property
    def event_count(self) -> int:
        return sum(self.counts.values())

    def inspect(self, step: int, loss: float | torch.Tensor, grad_norm: float | torch.Tensor | None,
                batch_ids: Iterable[int] | None = None) -> Decision:
        """Judge one optimizer step from its loss and (pre-clipping) gradient norm."""
        if not self.enabled:
            return Decision(OK, step)
        loss_value = _as_float(loss)
        grad_value = _as_float(grad_norm) if grad_norm is not None else None
        ids = [int(i) for i in batch_ids] if batch_ids is not None else []
        values = {"loss": loss_value, "grad_norm": grad_value}

        kind, reason = self._find_anomaly(loss_value, grad_value, values)
        if not kind:
            self.loss_history.append((step, loss_value))
            if grad_value is not None:
                self.grad_history.append((step, grad_value))
            self.consecutive_skips = 0
            return Decision(OK, step, values=values)

        if kind == FP16_OVERFLOW:
            decision = self._on_fp16_overflow(step, reason, values, ids)
        else:
            decision = Decision(self._action_for(kind, step), step, kind, reason, values, ids)
            if self.policy == "rollback" and decision.action == SKIP:
                decision.reason += (f"; isolated, so only this batch is dropped (another anomaly within "
                                    f"{self.args.snapshot_steps} steps rolls back)")
            decision = self._escalate(decision)
            if self.policy == "rollback" and decision.action in (SKIP, ROLLBACK) and ids:
                self.offending[tuple(sorted(ids))] = step  # not replayed if a rollback goes back past it
        self._record(decision)
        return decision

    def _find_anomaly(self, loss: float, grad: Optional[float], values: dict) -> tuple[str, str]:
        if self.precision == "fp16" and (not math.isfinite(loss) or (grad is not None and not math.isfinite(grad))):
            # Under fp16, an overflow in forward or backward is what the loss scaler handles.
            return FP16_OVERFLOW, "fp16 overflow: the loss scaler skips this step and lowers its scale"
        if not math.isfinite(loss):
            return NONFINITE_LOSS, f"loss is {loss}"
        if grad is not None and not math.isfinite(grad):
            return NONFINITE_GRAD, f"gradient norm is {grad}"
        spike = self._spike(loss, self.loss_history) if self.judge_loss_spikes else None
        if spike:
            values.update({f"loss_{k}": v for k, v in spike.items()})
            return LOSS_SPIKE, (f"loss {loss:.4g} > threshold {spike['threshold']:.4g} "
                                f"(recent median {spike['median']:.4g}, mean {spike['mean']:.4g}, std {spike['std']:.3g})")
        if grad is not None and self.judge_grad_spikes:
            spike = self._spike(grad, self.grad_history, self.args.grad_spike_ratio)
            if spike:
                values.update({f"grad_norm_{k}": v for k, v in spike.items()})
                return GRAD_SPIKE, (f"gradient norm {grad:.4g} > threshold {spike['threshold']:.4g} "
                                    f"(recent median {spike['median']:.4g})")
        return "", ""

    def _spike(self, value: float, history: deque, ratio: Optional[float] = None) -> Optional[dict]:
        """A spike is above mean + spike_sigmas * std *and* above `ratio` (default spike_ratio) x the median of
        the recent window."""
        if len(history) < self.args.min_history:
            return None
        recent = [v for _, v in history]
        mean = statistics.fmean(recent)
        std = statistics.pstdev(recent, mean)
        median = statistics.median(recent)
        threshold = max(mean + self.args.spike_sigmas * std, (ratio or self.args.spike_ratio) * median)
        if value <= threshold:
            return None
        return {"threshold": threshold, "mean": mean, "std": std, "median": median}

    def _action_for(self, kind: str, step: int) -> str:
        if self.policy != "rollback":
            return {"warn": WARN, "skip": SKIP, "abort": ABORT}[self.policy]
        recent = self.last_anomaly_step is not None and step - self.last_anomaly_step <= self.args.snapshot_steps
        if not recent:
            self.episode_start = step
        self.last_anomaly_step = step
        # An isolated anomaly: dropping the batch is enough. A repeat: the weights are suspect, go back.
        return ROLLBACK if recent else SKIP

    def _escalate(self, decision: Decision) -> Decision:
        """Give up when recovery does not work: too many rollbacks, or skipping every batch."""
        if decision.action == ROLLBACK:
            if self.rollbacks >= self.args.max_rollbacks:
                decision.action = ABORT
                decision.reason += f"; gave up after {self.rollbacks} rollbacks (max_rollbacks)"
            elif self._pick_snapshot(self._episode_step(decision.step)) is None:
                decision.action = SKIP  # nothing to go back to yet: at least keep the bad update out
                decision.reason += "; no good state kept yet, so the update is skipped instead"
        if decision.action == SKIP:
            self.consecutive_skips += 1
            if self.consecutive_skips > self.args.max_consecutive_skips:
                decision.action = ABORT
                decision.reason += f"; {self.consecutive_skips} steps in a row were skipped (max_consecutive_skips)"
        if decision.action == ROLLBACK:
            self._plan_rollback(decision)
        return decision

    def _on_fp16_overflow(self, step: int, reason: str, values: dict, ids: list) -> Decision:
        self.overflow_steps.append(step)
        while self.overflow_steps and self.overflow_steps[0] <= step - self.args.window:
            self.overflow_steps.popleft()
        recent = len(self.overflow_steps)
        values["overflows_in_window"] = recent
        if recent < self.args.max_fp16_overflows or self.policy in ("warn", "skip"):
            return Decision(SKIP, step, FP16_OVERFLOW, f"{reason} ({recent} in the last {self.args.window} steps)",
                            values, ids)
        target = self.fallback_precision
        reason = (f"{recent} fp16 overflows in the last {self.args.window} steps: fp16 has too little range here; "
                  f"continuing in {target} from the last good state")
        decision = Decision(ROLLBACK if self.policy == "rollback" else ABORT, step, FP16_OVERFLOW, reason, values, ids)
        if decision.action == ROLLBACK:
            if self._pick_snapshot(step) is None:
                decision.action = SKIP
                return decision
            decision.new_precision = target
            self._plan_rollback(decision, back_off=False)
        return decision

    # ------------------------------------------------------------------ snapshots and rollback

    def maybe_snapshot(self, step: int, state: LiveObjects) -> bool:
        """Keep a good state after an applied update at every `snapshot_steps`-th step (and the first time)."""
        if not self.enabled or self.policy not in ("rollback", "abort"):
            return False
        if self.snapshots and step % self.args.snapshot_steps != 0:
            return False
        self.snapshot(step, state)
        return True

    def snapshot(self, step: int, state: LiveObjects) -> None:
        """Copy the state after `step` updates. Tensors stay on their device (a LoRA adapter and its optimizer
        state are small; copying on the GPU needs no host synchronisation), unless an adapter's weights pass
        SNAPSHOT_ON_DEVICE_BYTES (LoRA on every expert of a mixture of experts): then in host memory."""
        if self.snapshots and self.snapshots[-1].step == step:
            self.snapshots.pop()
        params = dict(state.model.named_parameters())
        trainable = {name: p for name, p in params.items() if p.requires_grad}
        host = (len(trainable) < len(params)   # an adapter beside a frozen base (full fine-tuning: as it was)
                and sum(p.numel() * p.element_size() for p in trainable.values()) > SNAPSHOT_ON_DEVICE_BYTES)
        self.snapshots.append(Snapshot(
            step=step,
            weights={name: p.detach().to("cpu", copy=True) if host else p.detach().clone()
                     for name, p in trainable.items()},
            optimizer=_to_host(state.optimizer.state_dict()) if host else copy.deepcopy(state.optimizer.state_dict()),
            scheduler=copy.deepcopy(state.scheduler.state_dict()) if state.scheduler is not None else None,
            scaler=copy.deepcopy(state.scaler.state_dict()) if state.scaler is not None else None,
            rng=capture_rng(),
            data_position=copy.deepcopy(state.data_position),
            lr_scale=self.lr_scale,
        ))

    def _pick_snapshot(self, anomaly_step: int) -> Optional[Snapshot]:
        """The newest snapshot taken at least TRUST_STEPS steps before the anomaly: the updates just before
        it may be what made it anomalous. If the last rollback went to a snapshot and the trouble came back,
        go further back when an older one exists."""
        candidates = [s for s in self.snapshots if s.step <= anomaly_step - TRUST_STEPS]
        if not candidates:
            return None
        if (len(candidates) > 1 and self._last_restored_step == candidates[-1].step
                and anomaly_step - candidates[-1].step <= self.args.snapshot_steps):
            return candidates[-2]
        return candidates[-1]

    def _episode_step(self, step: int) -> int:
        return min(step, self.episode_start) if self.episode_start is not None else step

    def _plan_rollback(self, decision: Decision, back_off: bool = True) -> None:
        target = self._pick_snapshot(self._episode_step(decision.step))
        assert target is not None
        self._restore_target = target
        self.rollbacks += 1
        if back_off:
            self.lr_scale *= self.args.lr_backoff
            self.max_grad_norm = self._tighter_clip(self.max_grad_norm)
        decision.values.update({"restore_step": target.step, "lr_scale": self.lr_scale,
                                "max_grad_norm": self.max_grad_norm, "rollbacks": self.rollbacks})

    def _tighter_clip(self, current: float) -> float:
        """The next value of grad_norm_schedule below the current clip (0 = no clipping counts as infinite)."""
        current = current if current > 0 else math.inf
        tighter = [v for v in self.args.grad_norm_schedule if v < current]
        return float(max(tighter)) if tighter else (current if math.isfinite(current) else 0.0)

    def restore(self, state: LiveObjects, before_step: Optional[int] = None) -> int:
        """Write the good state chosen by the last rollback decision (or, with `before_step`, the newest one
        trusted for an anomaly at that step) back into the live objects; returns the step it belongs to.
        Applies the learning-rate back-off to the scheduler so it lasts for the rest of the run (and into
        checkpoints)."""
        snap = self._restore_target
        if snap is None and self.snapshots:
            if before_step is None:
                snap = self.snapshots[-1]
            else:
                snap = self._pick_snapshot(before_step) or self.snapshots[0]
        if snap is None:
            raise RuntimeError("guard.restore() called with no snapshot kept")
        self._restore_target = None
        self._last_restored_step = snap.step
        with torch.no_grad():
            for name, p in state.model.named_parameters():
                if name in snap.weights:
                    p.copy_(snap.weights[name])
        # load_state_dict may keep references to the tensors it is given; hand it copies so that a second
        # rollback to the same snapshot still finds it intact.
        state.optimizer.load_state_dict(copy.deepcopy(snap.optimizer))
        state.optimizer.zero_grad(set_to_none=True)
        if state.scheduler is not None and snap.scheduler is not None:
            state.scheduler.load_state_dict(copy.deepcopy(snap.scheduler))
        if state.scaler is not None and snap.scaler is not None:
            state.scaler.load_state_dict(copy.deepcopy(snap.scaler))
        restore_rng(snap.rng)
        state.data_position = copy.deepcopy(snap.data_position)
        scale_learning_rate(state.optimizer, state.scheduler, self.lr_scale / snap.lr_scale)
        # Statistics of steps after the snapshot describe a run that no longer exists.
        for history in (self.loss_history, self.grad_history):
            kept = [item for item in history if item[0] <= snap.step]
            history.clear()
            history.extend(kept)
        self.snapshots = deque([s for s in self.snapshots if s.step <= snap.step], maxlen=self.snapshots.maxlen)
        return snap.step

    def should_skip(self, batch_ids: Iterable[int]) -> bool:
        """True once for a batch that caused a rollback, when the replay reaches it again."""
        key = tuple(sorted(int(i) for i in batch_ids))
        return self.offending.pop(key, None) is not None

    def set_precision(self, precision: str) -> None:
        """The loop switched precision (after a fp16 -> bf16/fp32 decision)."""
        self.precision = precision
        self.overflow_steps.clear()

    # ------------------------------------------------------------------ reporting

    def _record(self, decision: Decision) -> None:
        self.counts[f"{decision.kind}:{decision.action}"] += 1
        event = {"event": "guard", "step": decision.step, "kind": decision.kind, "action": decision.action,
                 "reason": decision.reason, **{k: _json_number(v) for k, v in decision.values.items()}}
        if decision.batch_ids:
            event["batch_ids"] = decision.batch_ids
        if decision.new_precision:
            event["new_precision"] = decision.new_precision
        self.events.append(event)
        self.emit(event)

    def abort_error(self, decision: Decision, checkpoint: Optional[str] = None) -> GuardAbort:
        """The message a user reads on abort: step, values, likely cause, where the good state was saved."""
        values = ", ".join(f"{k}={_fmt(v)}" for k, v in decision.values.items() if k in ("loss", "grad_norm"))
        saved = f"; last good state saved to {checkpoint}" if checkpoint else ""
        return GuardAbort(f"numerical guard stopped the run at step {decision.step}: {decision.kind} ({values}); "
                          f"{decision.reason}. Likely cause: {self.likely_cause(decision.kind)}{saved}")

    def likely_cause(self, kind: str) -> str:
        if kind == FP16_OVERFLOW or (self.precision == "fp16" and kind in (NONFINITE_LOSS, NONFINITE_GRAD)):
            return "fp16 overflow (too little range for these activations/gradients); use bf16 where supported, else fp32"
        if kind in (NONFINITE_LOSS, NONFINITE_GRAD):
            return ("a bad batch (see batch_ids in metrics.jsonl), a learning rate that is too high, or a numerically "
                    "unstable op; try a lower learning_rate and max_grad_norm 0.5")
        return ("learning rate too high or warm-up too short for this model and hardware (seed 000: learning_rate "
                "5e-5, warmup_ratio 0.1, max_grad_norm 0.5 -> 0.3)")

    def summary(self) -> dict:
        by_kind = Counter()
        for key, n in self.counts.items():
            by_kind[key.split(":")[0]] += n
        return {"policy": self.policy, "events": self.event_count, "by_kind": dict(by_kind),
                "by_kind_action": dict(self.counts), "rollbacks": self.rollbacks, "lr_scale": self.lr_scale,
                "max_grad_norm": self.max_grad_norm, "precision": self.precision}

    def summary_text(self) -> str:
        if not self.enabled:
            return "guard: off (no checks)"
        if not self.event_count:
            return f"guard ({self.policy}): no events"
        parts = ", ".join(f"{n} {key.replace(':', ' -> ')}" for key, n in sorted(self.counts.items()))
        extra = ""
        if self.rollbacks:
            extra = (f"; {self.rollbacks} rollback(s): learning rate x{self.lr_scale:.3g}, "
                     f"max_grad_norm {self.max_grad_norm:g}")
        return f"guard ({self.policy}): {self.event_count} event(s): {parts}{extra}; precision {self.precision}"

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict:
        """What a resumed run needs (JSON-safe): statistics, counters, back-off. Snapshots stay in memory; after
        a resume the checkpoint itself is the first good state."""
        return {
            "policy": self.policy, "precision": self.precision, "max_grad_norm": self.max_grad_norm,
            "lr_scale": self.lr_scale, "rollbacks": self.rollbacks, "consecutive_skips": self.consecutive_skips,
            "counts": dict(self.counts), "loss_history": [list(x) for x in self.loss_history],
            "grad_history": [list(x) for x in self.grad_history], "overflow_steps": list(self.overflow_steps),
            "offending": [[list(k), v] for k, v in self.offending.items()], "events": self.events,
            "episode_start": self.episode_start, "last_anomaly_step": self.last_anomaly_step,
        }

    def load_state_dict(self, state: dict) -> None:
        self.precision = state.get("precision", self.precision)
        self.max_grad_norm = float(state["max_grad_norm"])
        self.lr_scale = float(state["lr_scale"])
        self.rollbacks = int(state["rollbacks"])
        self.consecutive_skips = int(state.get("consecutive_skips", 0))
        self.counts = Counter(state["counts"])
        self.loss_history = deque((tuple(x) for x in state["loss_history"]), maxlen=self.args.window)
        self.grad_history = deque((tuple(x) for x in state["grad_history"]), maxlen=self.args.window)
        self.overflow_steps = deque(state["overflow_steps"])
        self.offending = {tuple(k): v for k, v in state.get("offending", [])}
        self.events = list(state.get("events", []))
        self.episode_start = state.get("episode_start")
        self.last_anomaly_step = state.get("last_anomaly_step")


def scale_learning_rate(optimizer, scheduler, factor: float) -> None:
    """Multiply the current and all future learning rates by `factor` (the scheduler's base rates too, which
    its state_dict carries into checkpoints)."""
    if factor == 1.0:
        return
    for group in optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    inner = getattr(scheduler, "scheduler", scheduler)  # Accelerate wraps the scheduler
    if inner is not None and hasattr(inner, "base_lrs"):
        inner.base_lrs = [lr * factor for lr in inner.base_lrs]
        if hasattr(inner, "_last_lr"):
            inner._last_lr = [group["lr"] for group in optimizer.param_groups]


def _as_float(x: float | torch.Tensor) -> float:
    return float(x.detach().float().item()) if isinstance(x, torch.Tensor) else float(x)


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _to_host(value):
    """A copy of an optimizer's state dict with every tensor in host memory (load_state_dict moves them back)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: _to_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item) for item in value)
    return copy.deepcopy(value)


def weights_are_finite(params: list) -> bool:
    with torch.no_grad():
        return all(bool(torch.isfinite(p).all()) for p in params)
