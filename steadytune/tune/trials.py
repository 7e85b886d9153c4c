"""One trial of `steadytune tune`: its config, its training with the pruner asked after every evaluation, its score.

A trial is `steadytune train` with the drawn keys on the training rows minus the validation split (tune_val_size),
evaluated a few times on that split (eval_steps as a share of the run). Its score is the metric of the last
evaluation. A trial that the pruner stops is `pruned`; one that runs out of memory or ends non-finite (the guard's
abort, or NaN weights at the end) is recorded with the reason and pruned too, so the search goes on and TPE learns to
avoid that region. Anything else (a bug, a signal) ends the search. The trial's folder keeps its logs and metrics;
the weights are removed once it is scored (the final model is trained again on all the training rows).
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from steadytune.config import RunConfig, parse_overrides, read_yaml
from steadytune.errors import UserError
from steadytune.tune.search_space import SearchSpace, config_keys, nest
from steadytune.train import NonFiniteRun, run_training
from steadytune.training.folder_config import grants_asked, load_config_named, run_folder_of
from steadytune.training.guard import GuardAbort
from steadytune.training.run_folder import MANIFEST, remove_path
from steadytune.training.stopping import RunPruned

# --metric -> (the key the evaluation during training reports, the direction that is better)
METRICS = {"accuracy": ("eval_accuracy", "maximize"), "macro_f1": ("eval_macro_f1", "maximize"),
           "eval_loss": ("eval_loss", "minimize")}
# What a trial may end in without ending the search: recorded, and the trial pruned.
FAILURES = (torch.OutOfMemoryError, NonFiniteRun, GuardAbort)
# What a scored trial's folder keeps (its weights, checkpoints, tokenizer copy and report are removed).
KEPT = {"run_config.yaml", "metrics.jsonl", "train_results.json", "environment.json", "data_stats.json", MANIFEST}
TRIALS = "trials"
# The search's locks in its folder (study.py takes them; search.py's --fresh knows them as the search's own files)
LOCK = ".steadytune-tune.lock"
STUDY_NAME = "steadytune-tune"   # the one Optuna study in a search's study.db (tune checks a folder's is it)
ASK_LOCK = ".steadytune-tune-ask.lock"   # held by a worker while it takes its next trial


@dataclass
class Search:
    """What every trial of one search shares; written to OUT/tune_search.json for --nproc's worker processes."""
    config: str                       # the YAML
    overrides: list[str]              # its key=value overrides
    output_dir: str                   # the search's folder (the config's output_dir)
    metric: str                       # accuracy, macro_f1 or eval_loss
    trials: int                       # finished trials (complete or pruned) to reach
    timeout: float | None = None      # seconds of search per invocation (no new trial starts after it)
    val_size: float = 0.2             # tune_val_size of every trial
    evaluations: int = 4              # evaluations per trial, evenly spread: the pruner's checkpoints
    pruner: str = "median"            # median, halving, none
    seed: int = 0                     # the sampler's
    force: bool = False               # train despite start-up check errors
    space: dict = field(default_factory=dict)   # SearchSpace.to_dict()
    eval_batch_size: int | None = None  # the trials' per_device_eval_batch_size, where the config sets none

    @property
    def folder(self) -> Path:
        return Path(self.output_dir)

    @property
    def metric_key(self) -> str:
        return METRICS[self.metric][0]

    @property
    def direction(self) -> str:
        return METRICS[self.metric][1]

    def to_dict(self) -> dict:
        return asdict(self)

    def raw_config(self) -> dict:
        """The user's keys: the YAML, then the overrides (sections merged), as load_config would combine them. A run
        folder's file grants nothing (training/folder_config.py): what it asks for is left out of best_config.yaml."""
        own = read_yaml(self.config)
        if run_folder_of(self.config) is not None:
            asked = {grant.key for grant in grants_asked(own)}
            own = {k: v for k, v in own.items() if k not in asked}
        return merge(own, parse_overrides(list(self.overrides)))

    def trial_config(self, keys: dict, folder: Path) -> RunConfig:
        """A trial's config: the user's keys, the space's fixed keys, the drawn keys, then what tune sets for every
        trial (its folder, the validation split, the evaluations the pruner reads; no checkpoints, no trackers)."""
        tune_keys = {"output_dir": str(folder), "overwrite_output_dir": True, "tune_val_size": self.val_size,
                     "eval_strategy": "steps", "eval_steps": 1.0 / self.evaluations, "metric_for_best_model": None,
                     "save_steps": 10 ** 9, "plot_loss": False, "report_to": "none", "resume_from_checkpoint": None,
                     "do_eval": False, "do_predict": False}
        user = parse_overrides(list(self.overrides))
        if self.eval_batch_size and "per_device_eval_batch_size" not in {**read_yaml(self.config), **user}:
            # Each trial evaluates several times: on a GPU, 8 rows a batch (the default) would cost as much as training.
            tune_keys["per_device_eval_batch_size"] = self.eval_batch_size
        space = SearchSpace.from_dict(self.space)
        # a run folder's run_config.yaml as the search's config grants nothing (training/folder_config.py)
        return load_config_named(self.config, merge(user, nest(space.fixed), nest(keys), tune_keys))


@dataclass
class TrialOutcome:
    state: str                        # complete | pruned
    value: float | None = None        # the metric at the last evaluation (complete trials)
    failure: str | None = None        # why a failed trial was pruned (out of memory, non-finite, ...)
    pruned_at: int | None = None      # % of the run at the evaluation that pruned it
    seconds: float = 0.0
    evaluations: list = field(default_factory=list)   # [[% of the run, value], ...]


def merge(*layers: dict) -> dict:
    """Later layers win; a section (guard:, fault_injection:) is merged key by key."""
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = {**out[key], **value}
            else:
                out[key] = value
    return out


def trial_folder(search: Search, number: int) -> Path:
    return search.folder / TRIALS / f"trial-{number:04d}"


def run_trial(search: Search, trial, base_rank: int) -> TrialOutcome:
    """Train one trial (drawn from `trial`, an Optuna trial), reporting each evaluation to it; -> its outcome.
    Its console output goes to trials/trial-NNNN.log; failures in FAILURES come back as a pruned outcome."""
    space = SearchSpace.from_dict(search.space)
    params = space.sample(trial)
    keys = config_keys(params, base_rank)
    folder = trial_folder(search, trial.number)
    trial.set_user_attr("keys", keys)
    trial.set_user_attr("folder", str(folder.relative_to(search.folder)))
    outcome = TrialOutcome("complete")
    started = time.perf_counter()
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(folder.parent / f"{folder.name}.log", "w", encoding="utf-8") as log, \
                contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            cfg = search.trial_config(keys, folder)
            run_training(cfg, force=search.force, progress=False,
                         on_evaluate=pruning_hook(trial, search.metric_key, search.evaluations, outcome))
        if not outcome.evaluations:
            raise UserError(f"trial {trial.number}: the run ended without an evaluation to score")
        outcome.value = outcome.evaluations[-1][1]
    except RunPruned:
        outcome.state, outcome.pruned_at = "pruned", outcome.evaluations[-1][0]
    except FAILURES as e:
        outcome.state, outcome.failure = "pruned", describe_failure(e)
    finally:
        outcome.seconds = round(time.perf_counter() - started, 2)
        release_memory()
        keep_only_logs(folder)
    return outcome


def pruning_hook(trial, metric_key: str, evaluations: int, outcome: TrialOutcome):
    """run_training's on_evaluate: report the metric at this share of the run; True (stop) when the pruner says so.
    The pruner compares trials at the same step, so the share is reported on the grid of `evaluations` points
    (25, 50, 75, 100 for 4): trials of other lengths evaluate at slightly other shares (eval_steps is rounded up to
    whole steps). The last evaluation is reported too (the others' medians at 100 %), and never pruned."""
    reported: set[int] = set()

    def on_evaluate(step: int, total: int, results: dict) -> bool:
        if metric_key not in results:
            raise UserError(f"--metric: the evaluation reports no {metric_key} (it has {', '.join(sorted(results))}); "
                            "accuracy and macro_f1 need classification data (label_names), eval_loss works for all")
        value = float(results[metric_key])
        progress = round(100 * step / total)
        outcome.evaluations.append([progress, value])
        if not math.isfinite(value):
            raise NonFiniteRun(f"{metric_key} is {value} at step {step} of {total}")
        on_grid = round(round(progress * evaluations / 100) * 100 / evaluations) if step < total else 100
        if on_grid in reported:
            return False
        reported.add(on_grid)
        trial.report(value, on_grid)
        return step < total and trial.should_prune()
    return on_evaluate


def describe_failure(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, torch.OutOfMemoryError):
        return f"out of memory: {first[:300]}"
    if isinstance(error, GuardAbort):
        return f"stopped by the numerical guard: {first[:300]}"
    return f"non-finite: {first[:300]}"


def release_memory() -> None:
    """What one trial held, given back before the next: its model and optimizer (gone with its frames), the CUDA
    cache, and compiled code (each trial's model is a new module, which compiled layers would otherwise recompile for
    until torch's recompile limit)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    with contextlib.suppress(Exception):
        torch._dynamo.reset()


def keep_only_logs(folder: Path) -> None:
    """A scored trial's folder keeps its config, metrics and results; weights and checkpoints go (a search of 30
    trials would otherwise keep 30 adapters and 30 copies of the tokenizer)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name not in KEPT:
            remove_path(entry)


def trial_keys_line(keys: dict[str, Any]) -> str:
    """learning_rate=3.1e-04 lora_rank=16 ...: a trial's keys on one line."""
    def shown(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 or v == 0 else f"{v:.2e}"
        return str(v)
    return " ".join(f"{k}={shown(v)}" for k, v in keys.items())
