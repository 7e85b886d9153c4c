"""Fault injection (`fault_injection:` in the YAML): break a run on purpose to prove the numerical guard works.

A testing aid, off unless configured. Each fault models a *transient* event: it fires on the run's first pass
over its step only. When the guard rolls the run back (the step counter goes back) or skips a batch (the step
is tried again), the steps already reached are clean, and an LR-spike span that had begun is over, as after
a one-off overflow or a bad burst on real hardware. How far the run got is part of the checkpoint, so a
resumed run fires the faults still ahead of it, exactly as the uninterrupted run would.

The loop calls, per attempted optimizer step:
    injector.begin_step(step)
    loss = injector.corrupt_loss(step, loss)        # on each micro-batch loss, before backward
    injector.corrupt_gradients(step, parameters)    # after backward, before unscaling/clipping
    with injector.scaled_lr(step, optimizer): optimizer.step()
"""

from __future__ import annotations

import math
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import torch

from steadytune.training.monitor import read_metrics

NAN_LOSS, INF_LOSS, SPIKE_LOSS, FP16_OVERFLOW, LR_SPIKE = "nan_loss", "inf_loss", "spike_loss", "fp16_overflow", "lr_spike"
HANG = "hang"
KILL = "kill"
OOM = "out_of_memory"


def first_attempt() -> bool:
    """Not a restart of an elastic job (torch's agent counts them in TORCHELASTIC_RESTART_COUNT): the faults that end
    a process (hang, kill) fire on the first attempt only, as a one-off node failure would."""
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


class FaultInjector:
    def __init__(self, args, emit: Optional[Callable[[dict], None]] = None, rank: int = 0):
        self.args = args
        self.rank = rank                 # hang_rank picks the process that hangs
        self.emit = emit or (lambda event: None)
        self.fired: set[tuple[str, int]] = set()
        self.reached = 0                 # highest step begun so far
        self.first_pass = True           # is the current step begun for the first time?
        self.lr_span_over = False        # an LR-spike span ends for good once the run goes back
        self._loss_faults: dict[int, tuple[str, float]] = {}
        # Multiplying (not adding) makes the fault reach every gradient through backward, as a real
        # overflow in the forward pass would.
        if args.nan_loss_step is not None:
            self._loss_faults[args.nan_loss_step] = (NAN_LOSS, math.nan)
        if args.inf_loss_step is not None:
            self._loss_faults[args.inf_loss_step] = (INF_LOSS, math.inf)
        if args.spike_loss_step is not None:
            self._loss_faults[args.spike_loss_step] = (SPIKE_LOSS, args.spike_factor)

    @property
    def active(self) -> bool:
        a = self.args
        return bool(self._loss_faults) or a.fp16_overflow_step is not None or a.hang_step is not None or (
            a.lr_spike_start is not None and a.lr_spike_steps > 0) or a.kill_step is not None or a.oom_step is not None

    def describe(self) -> str:
        """One line for the start-up print, so nobody mistakes an injected fault for a real one."""
        a, parts = self.args, []
        for step, (kind, factor) in sorted(self._loss_faults.items()):
            parts.append(f"{kind} at step {step}" + (f" (x{factor:g})" if kind == SPIKE_LOSS else ""))
        if a.fp16_overflow_step is not None:
            parts.append(f"fp16 overflow (inf gradients) at step {a.fp16_overflow_step}")
        if a.lr_spike_start is not None and a.lr_spike_steps > 0:
            parts.append(f"learning rate x{a.lr_spike_factor:g} for steps {a.lr_spike_start}.."
                         f"{a.lr_spike_start + a.lr_spike_steps - 1}")
        if a.hang_step is not None:
            parts.append(f"rank {a.hang_rank} hangs at step {a.hang_step}")
        if a.kill_step is not None:
            parts.append(f"rank {a.kill_rank}'s process is killed at step {a.kill_step} (first attempt only)")
        if a.oom_step is not None:
            parts.append(f"out of memory at step {a.oom_step}")
        return "fault injection (testing aid): " + ", ".join(parts) if parts else "fault injection: none"

    def begin_step(self, step: int) -> None:
        self.first_pass = step > self.reached
        if not self.first_pass and any(kind == LR_SPIKE for kind, _ in self.fired):
            self.lr_span_over = True
        self.reached = max(self.reached, step)
        self.maybe_kill(step)
        self.maybe_hang(step)
        self.maybe_run_out_of_memory(step)

    def maybe_run_out_of_memory(self, step: int) -> None:
        """torch.OutOfMemoryError at the start of oom_step, as a GPU that runs out of memory raises it (on any device:
        `steadytune tune` must record such a trial and go on, and its tests run on a CPU)."""
        if self.args.oom_step == step and self._fire(OOM, step):
            raise torch.OutOfMemoryError(f"fault injection (testing aid): out of memory at step {step}")

    def maybe_kill(self, step: int) -> None:
        """kill_rank's process dies by SIGKILL at the start of kill_step, as a process does when its node fails: no
        handler runs, nothing is saved. Only on the job's first attempt (torch's elastic agent counts restarts in
        TORCHELASTIC_RESTART_COUNT), so the restarted job resumes past it, as after a one-off node failure."""
        a = self.args
        if a.kill_step != step or a.kill_rank != self.rank or not first_attempt():
            return
        if not self._fire(KILL, step, rank=self.rank):
            return
        print(f"fault injection (testing aid): killing rank {self.rank}'s process (pid {os.getpid()}) at step {step}",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def maybe_hang(self, step: int) -> None:
        """hang_rank stops at the start of hang_step, before the step's first collective, and never returns: the
        other ranks wait for it, as they would for a rank stuck in a driver call. The hang watchdog ends it."""
        a = self.args
        if a.hang_step != step or a.hang_rank != self.rank or not first_attempt() or \
                not self._fire(HANG, step, rank=self.rank):
            return
        import threading
        threading.Event().wait()

    def _fire(self, kind: str, step: int, **values) -> bool:
        """True when (kind, step) comes up on the first pass over the step."""
        if not self.first_pass or (kind, step) in self.fired:
            return False
        self.fired.add((kind, step))
        safe = {k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}
        self.emit({"event": "fault_injected", "step": step, "kind": kind, **safe})
        return True

    def corrupt_loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """NaN, inf or x factor on the first micro-batch loss of the faulty step (one batch, as in real life)."""
        fault = self._loss_faults.get(step)
        if fault is None or not self._fire(fault[0], step, factor=fault[1]):
            return loss
        return loss * fault[1]

    def corrupt_gradients(self, step: int, parameters: Iterable[torch.nn.Parameter]) -> bool:
        """Set every gradient to +inf at the faulty step: what an fp16 overflow in backward looks like."""
        if self.args.fp16_overflow_step != step or not self._fire(FP16_OVERFLOW, step):
            return False
        with torch.no_grad():
            for p in parameters:
                if p.grad is not None:
                    p.grad.fill_(math.inf)
        return True

    def lr_factor(self, step: int) -> float:
        a = self.args
        if (a.lr_spike_start is None or self.lr_span_over
                or not a.lr_spike_start <= step < a.lr_spike_start + a.lr_spike_steps):
            return 1.0
        return a.lr_spike_factor if self._fire(LR_SPIKE, step, factor=a.lr_spike_factor) else 1.0

    @contextmanager
    def scaled_lr(self, step: int, optimizer) -> Iterator[float]:
        """Run the optimizer step with the learning rate multiplied during the LR-spike span; the scheduler's
        own rates are untouched, so the spike ends when the span does."""
        factor = self.lr_factor(step)
        if factor == 1.0:
            yield 1.0
            return
        saved = [group["lr"] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * factor
        try:
            yield factor
        finally:
            for group, lr in zip(optimizer.param_groups, saved):
                group["lr"] = lr

    def state_dict(self) -> dict:
        return {"fired": sorted([kind, step] for kind, step in self.fired), "reached": self.reached,
                "lr_span_over": self.lr_span_over}

    def load_state_dict(self, state: dict) -> None:
        self.fired = {(kind, int(step)) for kind, step in state.get("fired", [])}
        self.reached = int(state.get("reached", 0))
        self.lr_span_over = bool(state.get("lr_span_over", False))


def plot_raw_vs_guarded(raw_dir: str | Path, guarded_dir: str | Path, out_png: str | Path,
                        log_scale: bool = True) -> Path:
    """One picture of what the guard did: the training loss of the same faulty run without the guard (raw) and
    with it, guard actions as vertical lines. A rollback replays steps; the guarded curve shows the replay
    (the last value logged for each step)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, ax = plt.subplots(figsize=(7, 4))
    for label, folder in (("raw (guard_policy: off)", raw_dir), ("guarded", guarded_dir)):
        records = read_metrics(Path(folder) / "metrics.jsonl")
        by_step = {r["step"]: float(r["loss"]) for r in records if "loss" in r and "event" not in r}
        steps = sorted(by_step)
        ax.plot(steps, [by_step[k] for k in steps], label=label)
        if label == "guarded":
            for r in records:
                if r.get("event") == "guard":
                    ax.axvline(r["step"], color="red", alpha=0.35, linestyle="--")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss" + (" (log)" if log_scale else ""))
    if log_scale:
        ax.set_yscale("log")
    ax.legend(title="red: guard actions")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return Path(out_png)


if __name__ == "__main__":  # python -m steadytune.training.faults RAW_DIR GUARDED_DIR OUT.png
    if len(sys.argv) != 4:
        sys.exit("usage: python -m steadytune.training.faults RAW_OUTPUT_DIR GUARDED_OUTPUT_DIR OUT.png")
    print(plot_raw_vs_guarded(*sys.argv[1:]))
