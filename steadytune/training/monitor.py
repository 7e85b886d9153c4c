"""What a run reports while it trains: metrics.jsonl, throughput, memory, and the loss plot.

metrics.jsonl holds one JSON object per line: a logged step ({"step", "epoch", "loss", "grad_norm", "lr",
"tokens", "input_tokens_per_s", "target_tokens_per_s", "tokens_per_s", memory...}), an evaluation ({"step",
"eval_loss", ...}), or an event ({"event": kind, "step", ...}) from the guard or the recipe. Appending line by line
means a killed run still leaves every line it logged.

Throughput is logged twice, named for what it counts: `input_tokens_per_s`, the real (non-pad) tokens the model
processed, which is what the hardware does (the progress bar shows it as `in_tok/s`); and `target_tokens_per_s`,
the tokens the loss was computed on (one or two per example in classification, so a small number there).
`tokens_per_s` is kept for older readers and equals `input_tokens_per_s`; `tokens` is the running count of target
tokens.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch


class MetricsLog:
    def __init__(self, path: str | Path, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(_jsonable(record), ensure_ascii=False) + "\n")

    def event(self, kind: str, step: int, **values: Any) -> None:
        self.write({"event": kind, "step": step, **values})

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines logged after the checkpoint, so the log reads as one uninterrupted run."""
        if not self.enabled or not self.path.exists():
            return
        kept = [line for line in read_metrics(self.path) if int(line.get("step", 0)) <= step]
        with self.path.open("w", encoding="utf-8") as f:
            for record in kept:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_metrics(path: str | Path) -> list[dict]:
    records = []
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a kill mid-write
    return records


def _jsonable(record: dict) -> dict:
    out = {}
    for key, value in record.items():
        if isinstance(value, torch.Tensor):
            value = value.item() if value.numel() == 1 else value.tolist()
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)  # JSON has no NaN/inf; keep them visible as "nan"/"inf"
        out[key] = value
    return out


class Throughput:
    """Input (real, non-pad) and target tokens per second over the span since the last report (what a user
    watches), synchronising the GPU only when a report is made."""

    def __init__(self, device: torch.device):
        self.device = device
        self.input_tokens = 0
        self.target_tokens = 0
        self.start = time.perf_counter()

    def add(self, input_tokens: int, target_tokens: int = 0) -> None:
        self.input_tokens += input_tokens
        self.target_tokens += target_tokens

    def report(self) -> dict[str, float]:
        """-> {"input_tokens_per_s", "target_tokens_per_s", "tokens_per_s" (= input, for older readers)}."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        seconds = max(now - self.start, 1e-9)
        rates = {"input_tokens_per_s": round(self.input_tokens / seconds, 1),
                 "target_tokens_per_s": round(self.target_tokens / seconds, 1)}
        rates["tokens_per_s"] = rates["input_tokens_per_s"]
        self.input_tokens, self.target_tokens, self.start = 0, 0, now
        return rates


def memory_stats(device: torch.device) -> dict[str, float]:
    if device.type != "cuda":
        return {}
    gib = 2**30
    return {"mem_allocated_gib": round(torch.cuda.memory_allocated() / gib, 3),
            "mem_reserved_gib": round(torch.cuda.memory_reserved() / gib, 3),
            "mem_peak_gib": round(torch.cuda.max_memory_allocated() / gib, 3)}


def step_record(step: int, steps_per_epoch: int, loss: float, grad_norm, lr: float, tokens_seen: int,
                throughput: Throughput, **extra) -> dict:
    """One logged step of metrics.jsonl: the loss averaged over the steps since the last record, the gradient norm
    (before clipping), the learning rate, the target tokens seen, throughput and GPU memory since the last record,
    and what the stage or a mixture of experts adds (`extra`)."""
    return {"step": step, "epoch": round(step / steps_per_epoch, 4), "loss": loss,
            "grad_norm": None if grad_norm is None else float(grad_norm), "lr": lr, "tokens": tokens_seen,
            **throughput.report(), **memory_stats(throughput.device), **extra}


def plot_loss(metrics_path: str | Path, out_png: str | Path) -> Path | None:
    """training_loss.png: the raw loss per logged step, a smoothed line, and eval loss when present."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    train = [(r["step"], r["loss"]) for r in records if "loss" in r and isinstance(r["loss"], (int, float))]
    evals = [(r["step"], r["eval_loss"]) for r in records if isinstance(r.get("eval_loss"), (int, float))]
    events = [r for r in records if "event" in r and r["event"].startswith("guard")]
    if not train:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    steps, losses = zip(*train)
    ax.plot(steps, losses, alpha=0.4, label="training loss")
    ax.plot(steps, smooth(losses), label="smoothed")
    if evals:
        ax.plot(*zip(*evals), marker="o", label="eval loss")
    for record in events:
        ax.axvline(record["step"], color="red", alpha=0.3, linestyle="--")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return Path(out_png)


def smooth(values, weight: float = 0.8) -> list[float]:
    """Exponential moving average with bias correction (so the first points are not pulled to zero)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = weight * avg + (1 - weight) * v
        out.append(avg / (1 - weight**i))
    return out
