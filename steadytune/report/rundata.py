"""Read a run folder as it is: finished, still running, stopped by the guard, or killed mid-write.

Every file is optional. A file that cannot be read (a JSON cut short by a kill, a YAML someone edited) is
left out with a note that the report shows; a torn last line of metrics.jsonl is skipped and counted. Nothing
here raises for what a run left behind: only a folder that is not a run at all is an error.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadytune.config import load_yaml_file
from steadytune.errors import UserError
from steadytune.training.run_folder import LOCK, MANIFEST, lock_holder_alive

# Files that make a folder a run (train, eval and the run folder's manifest write them).
RUN_MARKERS = ("metrics.jsonl", "run_config.yaml", "train_results.json", "eval_results.json", MANIFEST)
SAMPLE_ROWS = 20          # misclassified examples / generated answers shown
STALE_SECONDS = 15 * 60   # no manifest: a run silent this long without train_results.json counts as killed

FINISHED, RUNNING, ABORTED, KILLED = "finished", "running", "aborted by the guard", "killed"
INTERRUPTED, FAILED, DIVERGED = "interrupted", "failed", "diverged"


@dataclass
class Run:
    path: Path
    name: str
    config: dict = field(default_factory=dict)         # run_config.yaml without its decisions
    decisions: dict = field(default_factory=dict)      # key -> {value, reason}
    environment: dict | None = None
    train_results: dict | None = None
    eval_results: dict | None = None
    demo_results: dict | None = None
    manifest: dict | None = None                       # training/run_folder.py: status, command, start, files
    lock: dict | None = None                           # training/run_folder.py: pid and host of the training process
    data_stats: dict | None = None                     # lengths, truncation, packing (record.py)
    steps: list[dict] = field(default_factory=list)    # logged optimizer steps
    evals: list[dict] = field(default_factory=list)    # evaluations during training
    events: list[dict] = field(default_factory=list)   # guard, fault injection and resume events
    misclassified: list[dict] = field(default_factory=list)
    misclassified_source: str = ""
    generated: list[dict] = field(default_factory=list)
    expert_load: dict | None = None                    # a mixture of experts: the last expert_load.jsonl record
    notes: list[str] = field(default_factory=list)     # what could not be read, and why
    status: str = ""
    status_detail: str = ""
    last_write: float | None = None                    # newest mtime of the run's files (epoch seconds)

    # -------------------------------------------------------------- views the charts and header use
    def series(self, key: str, records: list[dict] | None = None) -> tuple[list[int], list[float | None]]:
        """(steps, values) of `key` over the records that have it; non-finite values become None (a gap)."""
        steps, values = [], []
        for r in self.steps if records is None else records:
            if key in r:
                steps.append(int(r.get("step", 0)))
                values.append(as_number(r[key]))
        return steps, values

    def eval_keys(self) -> list[str]:
        keys: list[str] = []
        for r in self.evals:
            keys += [k for k in r if k.startswith("eval_") and k not in keys and as_number(r[k]) is not None]
        return keys

    @property
    def guard_events(self) -> list[dict]:
        return [e for e in self.events if e.get("event") == "guard"]

    @property
    def task(self) -> str | None:
        if self.eval_results:
            return self.eval_results.get("task")
        if self.config.get("label_names") or self.demo_results:
            return "classification"
        return None

    @property
    def tokens_seen(self) -> int | None:
        if self.train_results and self.train_results.get("tokens_seen") is not None:
            return int(self.train_results["tokens_seen"])
        _, tokens = self.series("tokens")
        tokens = [t for t in tokens if t is not None]
        return int(tokens[-1]) if tokens else None

    @property
    def total_steps(self) -> int | None:
        value = self.decisions.get("total_steps", {}).get("value")
        return int(value) if isinstance(value, (int, float)) else None

    @property
    def last_step(self) -> int:
        steps = [int(r.get("step", 0)) for r in self.steps + self.evals + self.events]
        return max(steps, default=0)

    def best_eval(self) -> tuple[str, float, int] | None:
        """(metric, value, step) of the best evaluation during training: metric_for_best_model when set, else
        accuracy when measured, else eval loss."""
        wanted = self.config.get("metric_for_best_model")
        keys = self.eval_keys()
        key = next((k for k in (wanted, f"eval_{wanted}") if k and k in keys), None)
        key = key or next((k for k in ("eval_accuracy", "eval_macro_f1", "eval_loss") if k in keys), None)
        if key is None:
            return None
        steps, values = self.series(key, self.evals)
        pairs = [(v, s) for s, v in zip(steps, values) if v is not None]
        if not pairs:
            return None
        value, step = (min if "loss" in key else max)(pairs, key=lambda p: p[0])
        return key, value, step


def as_number(value: Any) -> float | None:
    """A metric value as a finite float, or None (training/monitor.py writes NaN/inf as the strings "nan"/"inf")."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# ------------------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------------------

def load_run(path: str | Path, name: str | None = None) -> Run:
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"{folder}: not a folder (give the output_dir of a run)")
    if not any((folder / marker).exists() for marker in RUN_MARKERS):
        raise UserError(f"{folder}: no run here (none of {', '.join(RUN_MARKERS)} found); give a run's output_dir")
    run = Run(path=folder, name=name or folder.resolve().name)
    config = _read(run, "run_config.yaml", _load_yaml)
    if isinstance(config, dict):
        run.decisions = config.pop("decisions", None) or {}
        run.config = config
    run.environment = _read(run, "environment.json", _load_json)
    run.train_results = _read(run, "train_results.json", _load_json)
    run.eval_results = _read(run, "eval_results.json", _load_json)
    run.demo_results = _read(run, "demo_results.json", _load_json)
    run.manifest = _read(run, MANIFEST, _load_json)
    run.lock = _read(run, LOCK, _load_json)
    run.data_stats = _read(run, "data_stats.json", _load_json)
    _read_metrics(run)
    _read_samples(run)
    _read_expert_load(run)
    run.last_write = _last_write(folder)
    run.status, run.status_detail = run_status(run)
    return run


def _read(run: Run, filename: str, loader) -> Any:
    path = run.path / filename
    if not path.is_file():
        return None
    try:
        value = loader(path)
    except (OSError, ValueError, RecursionError) as e:
        run.notes.append(f"{filename} could not be read ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                         "left out (a run killed while writing it?)")
        return None
    if value is not None and not isinstance(value, dict):
        run.notes.append(f"{filename} does not hold a mapping; left out")
        return None
    return value


def _load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _load_yaml(path: Path) -> Any:
    return load_yaml_file(path, unique_keys=False)  # bounded: a run folder may come from anyone


def read_jsonl(path: Path, limit: int | None = None) -> tuple[list[dict], int]:
    """(records, lines that are not JSON objects). A line cut by a kill mid-write is one of the latter."""
    records, bad = [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
            if limit is not None and len(records) >= limit:
                break
    return records, bad


def _read_metrics(run: Run) -> None:
    path = run.path / "metrics.jsonl"
    if not path.is_file():
        return
    records, bad = read_jsonl(path)
    if bad:
        run.notes.append(f"metrics.jsonl: {bad} line(s) could not be read and were skipped (a line cut short by a "
                         "kill mid-write is expected)")
    for record in records:
        if not isinstance(record.get("step", 0), (int, float)):
            continue
        if "event" in record:
            run.events.append(record)
        elif "loss" in record:
            run.steps.append(record)
        elif any(k.startswith("eval_") for k in record):
            run.evals.append(record)


def _read_expert_load(run: Run) -> None:
    """A MoE run's last logged routing: each layer's per-expert load (training/experts.py), if well formed."""
    path = run.path / "expert_load.jsonl"
    if not path.is_file():
        return
    records, _ = read_jsonl(path)
    for record in reversed(records):
        load = record.get("load")
        if (isinstance(load, list) and load and all(isinstance(row, list) and row for row in load)
                and all(as_number(v) is not None for row in load for v in row)):
            run.expert_load = {"step": record.get("step"), "load": load}
            return
    run.notes.append("expert_load.jsonl holds no well-formed record; the routing chart is left out")


def _read_samples(run: Run) -> None:
    """A sample of misclassified examples (errors_to_review.jsonl when eval wrote it, else drawn from
    predictions.jsonl with a fixed seed) and the first generated answers."""
    errors = run.path / "errors_to_review.jsonl"
    predictions = run.path / "predictions.jsonl"
    if errors.is_file():
        run.misclassified, _ = read_jsonl(errors, SAMPLE_ROWS)
        run.misclassified_source = "errors_to_review.jsonl (drawn by `steadytune eval --review-errors`)"
    elif predictions.is_file():
        rows, _ = read_jsonl(predictions)
        misses = [dict(r, index=i) for i, r in enumerate(rows) if r.get("prediction") != r.get("gold")]
        chosen = sorted(random.Random(0).sample(range(len(misses)), min(SAMPLE_ROWS, len(misses))))
        run.misclassified = [misses[i] for i in chosen]
        run.misclassified_source = (f"{len(run.misclassified)} of {len(misses)} misses in predictions.jsonl, "
                                    "drawn at random (seed 0)")
    generated = run.path / "generated_predictions.jsonl"
    if generated.is_file():
        run.generated, _ = read_jsonl(generated, SAMPLE_ROWS)


def _last_write(folder: Path) -> float | None:
    times = [(folder / name).stat().st_mtime for name in ("metrics.jsonl", "train_results.json", "eval_results.json",
                                                          MANIFEST, "run_config.yaml")
             if (folder / name).exists()]
    return max(times) if times else None


# ------------------------------------------------------------------------------------------------------
# Status
# ------------------------------------------------------------------------------------------------------

def run_status(run: Run) -> tuple[str, str]:
    """(status, detail). The run folder's manifest says what the training process last recorded (running,
    finished, aborted, interrupted, failed, diverged); "running" is believed only while the process holding the
    folder's lock is alive, else the run was killed. A folder without a manifest (an earlier build) is judged
    from its files: train_results.json is written last, a guard abort leaves an "abort" event, and a long
    silence counts as killed."""
    step = run.last_step
    total = run.total_steps
    progress = f"step {step}" + (f" of {total}" if total else "")
    recorded = (run.manifest or {}).get("status")
    aborts = [e for e in run.guard_events if e.get("action") == "abort"]
    abort_detail = (f"at step {aborts[-1].get('step')}: {aborts[-1].get('kind', '')} ({aborts[-1].get('reason', '')})"
                    if aborts else f"at {progress}")
    if recorded == "running" or (recorded is None and run.lock):
        alive = lock_holder_alive(run.lock) if run.lock else False
        if alive is True:
            return RUNNING, progress
        if alive is False:
            return KILLED, f"the training process ended without finishing, at {progress}"
        return RUNNING, f"{progress} (by another host's process {run.lock.get('pid')}; not checked from here)"
    if recorded == "aborted" or (recorded is None and aborts and run.train_results is None):
        return ABORTED, abort_detail
    if recorded == "interrupted":
        return INTERRUPTED, f"stopped by a signal at {progress}; the same command continues from its last checkpoint"
    if recorded == "failed":
        return FAILED, f"stopped by an error at {progress}"
    if recorded == "diverged" or (run.train_results or {}).get("status") == "diverged":
        return DIVERGED, f"ended with a non-finite loss or weight at {progress}; no adapter was saved"
    if run.train_results is not None:
        return FINISHED, f"{run.train_results.get('global_step', step)} steps"
    if run.last_write is not None and time.time() - run.last_write < STALE_SECONDS:
        return RUNNING, f"{progress}; last write {time.time() - run.last_write:.0f} s ago (no manifest: a guess)"
    return KILLED, f"stopped at {progress} without finishing"


