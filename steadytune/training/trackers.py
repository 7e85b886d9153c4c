"""Experiment trackers: LLaMA-Factory's `report_to`, logged through Accelerate's tracker integrations.

`report_to` takes LLaMA-Factory's (that is, transformers') values: `none`, one name, a list (YAML list or comma
string), or `all` (every supported tracker whose package is installed). Each name maps onto Accelerate's
tracker of that name (`Accelerator(log_with=...)`, `init_trackers`, `accelerator.log`); a tracker whose package
is missing is an error naming the package, never a silent skip (Accelerate itself would only log that at
debug level). metrics.jsonl is written either way: trackers are a copy for the dashboards people already use.

TensorBoard writes into `logging_dir`, as with transformers' TrainingArguments: by default
`output_dir/runs/<Mon DD_HH-MM-SS>_<host>`. Metric names follow transformers' Trainer (`train/loss`,
`train/learning_rate`, `eval/loss`, `eval/accuracy`), so dashboards built for LLaMA-Factory runs still work.
"""

from __future__ import annotations

import atexit
import datetime
import socket
from pathlib import Path
from typing import Any

from steadytune.config import TRACKER_PACKAGES, parse_report_to, tracker_installed
from steadytune.errors import UserError

PROJECT = "steadytune"   # the project (wandb, trackio, swanlab) or experiment (mlflow) runs are filed under
# metrics.jsonl key -> the name transformers' Trainer logs it under (before the train/ or eval/ prefix)
TRAINER_NAMES = {"lr": "learning_rate", "tokens": "num_input_tokens_seen", "tokens_per_s": "tokens_per_second"}


def default_logging_dir(output_dir: str | Path) -> Path:
    """transformers' default for TrainingArguments.logging_dir."""
    stamp = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
    return Path(output_dir) / "runs" / f"{stamp}_{socket.gethostname()}"


class Trackers:
    """The trackers of one run: what to give Accelerator(log_with=...), then start / log / finish."""

    _active: list["Trackers"] = []   # started and not finished; ended at exit (a run the guard stopped included)

    def __init__(self, report_to: Any, output_dir: str | Path, logging_dir: str | Path | None = None,
                 run_name: str | None = None):
        self.names = parse_report_to(report_to)
        missing = [name for name in self.names if not tracker_installed(name)]
        if missing:
            package = TRACKER_PACKAGES[missing[0]]
            raise UserError(f"report_to: {missing[0]} needs the {package} package, which is not installed "
                            f"(pip install {package}); or remove {missing[0]} from report_to")
        self.logging_dir = Path(logging_dir) if logging_dir else default_logging_dir(output_dir)
        self.run_name = run_name or Path(output_dir).resolve().name   # run_name: transformers' (and LF's) key
        self.accelerator = None

    def log_with(self) -> list | None:
        """For Accelerator(log_with=...). TensorBoard goes in as a tracker object, so that it writes into
        logging_dir itself (Accelerate's named tracker would add a project sub-folder)."""
        if not self.names:
            return None
        from accelerate.tracking import TensorBoardTracker

        return [TensorBoardTracker(self.logging_dir.name, self.logging_dir.parent) if name == "tensorboard" else name
                for name in self.names]

    def start(self, accelerator, config: dict) -> None:
        if not self.names:
            return
        for other in list(Trackers._active):  # a run restarted in another precision ends its first trackers
            other.finish()
        run = {"wandb": {"name": self.run_name}, "trackio": {"name": self.run_name},
               "swanlab": {"experiment_name": self.run_name}, "mlflow": {"run_name": self.run_name}}
        accelerator.init_trackers(PROJECT, config=hyperparameters(config),
                                  init_kwargs={k: v for k, v in run.items() if k in self.names})
        self.accelerator = accelerator
        Trackers._active.append(self)

    def log(self, record: dict) -> None:
        """One metrics.jsonl record (a logged step or an evaluation) to every tracker, under Trainer's names."""
        if self.accelerator is None or "step" not in record:
            return
        values = {}
        for key, value in record.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if key.startswith("eval_"):
                values[f"eval/{key.removeprefix('eval_')}"] = value
            else:
                values[f"train/{TRAINER_NAMES.get(key, key)}"] = value
        if values:
            self.accelerator.log(values, step=int(record["step"]))

    def finish(self) -> None:
        if self.accelerator is None:
            return
        for tracker in self.accelerator.trackers:
            tracker.finish()
        self.accelerator.trackers = []
        self.accelerator = None
        if self in Trackers._active:
            Trackers._active.remove(self)


def hyperparameters(config: dict, prefix: str = "") -> dict:
    """The resolved config, flattened to the scalar values every tracker accepts (lists as text)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "decisions":
            continue
        if isinstance(value, dict):
            out.update(hyperparameters(value, f"{prefix}{key}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[f"{prefix}{key}"] = value
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


@atexit.register
def _finish_active() -> None:
    for trackers in list(Trackers._active):
        trackers.finish()
