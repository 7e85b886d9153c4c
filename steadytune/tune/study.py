"""The Optuna side of `steadytune tune`: the study, kept in SQLite in the search's folder, so that a killed search
resumes where it was; TPE proposes each trial, a median or successive-halving pruner stops unpromising ones at their
evaluations; the trial loop (ask, train, tell) that the driver or each --nproc worker runs; the results as plain JSON.

Resuming: the same command again opens OUT/study.db. A trial that a kill left `running`, or that a signal ended
(`fail`), is run again with the same keys (enqueued once); trials already scored count towards --trials. The search
(config, overrides, space, metric, validation split) must be the one the study was made for, else the command
refuses, naming what differs (--fresh starts over).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from steadytune.errors import UserError
from steadytune.tune.search_space import SearchSpace, config_trial
from steadytune.tune.trials import ASK_LOCK, LOCK, STUDY_NAME, Search, TrialOutcome, run_trial, trial_keys_line
from steadytune.training.resume import resume_fingerprint
from steadytune.training.run_folder import lock_holder_alive, write_json_atomic

DB = "study.db"
RESULTS = "tune_results.json"
# What a search's identity is made of: a study made for other values is refused on resume.
IDENTITY = ("config", "metric", "val_size", "evaluations", "space")
# Keys that change no trial's score: a resumed search may differ in them (another machine, another log cadence).
BOOKKEEPING = {"output_dir", "per_device_eval_batch_size", "logging_steps", "logging_dir", "report_to", "cache_dir",
               "hang_timeout", "ddp_timeout", "run_name"}
STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "fail",
          TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}

optuna.logging.set_verbosity(optuna.logging.WARNING)   # one line per trial is ours to print
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


# ---------------------------------------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------------------------------------

def storage_of(folder: Path) -> optuna.storages.RDBStorage:
    """SQLite in the search's folder; a long busy timeout, since --nproc workers write to it at once."""
    url = f"sqlite:///{(folder / DB).resolve()}"
    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 300}})


def open_study(search: Search, worker: int = 0) -> optuna.Study:
    """The search's study, made on first use. Each worker's TPE gets its own seed (the same seed in two processes
    would draw the same first trials); constant_liar keeps parallel workers from proposing the same point."""
    sampler = optuna.samplers.TPESampler(seed=search.seed + 1000 * worker, multivariate=True, constant_liar=True,
                                         n_startup_trials=startup_trials(search.trials))
    return optuna.create_study(storage=storage_of(search.folder), study_name=STUDY_NAME, sampler=sampler,
                               pruner=make_pruner(search.pruner, search.trials, search.evaluations),
                               direction=search.direction, load_if_exists=True)


def startup_trials(trials: int) -> int:
    """Random trials before TPE models the results: a third of the budget, between 2 and 10 (Optuna's default)."""
    return max(2, min(10, trials // 3))


def make_pruner(name: str, trials: int, evaluations: int) -> optuna.pruners.BasePruner:
    """Steps are % of a trial's run on the grid of its evaluations (25, 50, 75, 100 for 4), so trials of other
    lengths compare at the same share."""
    first = 100 // evaluations
    if name == "median":
        # Not before 2 trials are scored, nor at a trial's first evaluation (too early to tell).
        return optuna.pruners.MedianPruner(n_startup_trials=max(2, min(5, trials // 5)), n_warmup_steps=first + 1)
    if name == "halving":
        # Rungs at the second evaluation, then at each doubling of the run.
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=2 * first, reduction_factor=2)
    return optuna.pruners.NopPruner()


def identity_of(search: Search) -> dict:
    """What makes two invocations the same search: the resolved config of a trial (every key, and the training
    files' sizes and hashes), the metric, the validation split, the evaluations and the space."""
    cfg = search.trial_config({}, search.folder / "trials" / "identity")
    config = {k: v for k, v in resume_fingerprint(cfg).items() if k not in BOOKKEEPING}
    return json.loads(json.dumps({"config": config, "metric": search.metric, "val_size": search.val_size,
                                  "evaluations": search.evaluations, "space": search.space}, default=str))


def check_same_search(study: optuna.Study, identity: dict) -> None:
    """A resumed study must be this search's; the first time, record what it is."""
    recorded = study.user_attrs.get("identity")
    if recorded is None:
        study.set_user_attr("identity", identity)
        return
    differences = []
    for part in IDENTITY:
        old, new = recorded.get(part), identity.get(part)
        if part == "config" and isinstance(old, dict) and isinstance(new, dict):
            differences += [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                            if old.get(k) != new.get(k)]
        elif old != new:
            differences.append(f"{part}: {json.dumps(old, default=str)[:120]} -> {json.dumps(new, default=str)[:120]}")
    if differences:
        shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
        raise UserError(f"{study_path(study)}: holds a search with other settings ({shown}). Put them back to resume "
                        "it, pass --fresh to start over, or choose another output_dir")


def study_path(study: optuna.Study) -> str:
    return str(getattr(study._storage, "url", DB)).removeprefix("sqlite:///")   # for messages only


def requeue_unfinished(study: optuna.Study) -> list[int]:
    """Trials a kill left `running` are marked failed; every failed trial not run again yet is enqueued with its keys
    (once: the study remembers which). Only the driver calls this, holding the search's lock, with no worker alive."""
    done = set(study.user_attrs.get("requeued", []))
    again = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
        elif t.state != TrialState.FAIL:
            continue
        if t.number in done or not t.params:
            continue
        study.enqueue_trial(t.params, user_attrs={"rerun_of": t.number})
        again.append(t.number)
    if again:
        study.set_user_attr("requeued", sorted(done | set(again)))
    return again


def start_from_config(study: optuna.Study, space: SearchSpace, search: Search) -> dict:
    """A new study's first trial: the config's own values, where the space holds them (search_space.config_trial);
    -> those values ({} for a resumed study, or when none lies in the space)."""
    if study.get_trials(deepcopy=False):
        return {}
    values = resume_fingerprint(search.trial_config({}, search.folder / "trials" / "config"))
    first = config_trial(space, values)
    if first:
        study.enqueue_trial(first, user_attrs={"from_config": True})
    return first


def finished(study: optuna.Study) -> int:
    """Scored trials: complete or pruned (failures recorded as pruned count; a killed one does not)."""
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    try:
        return study.best_trial
    except ValueError:   # no complete trial yet
        return None


# ---------------------------------------------------------------------------------------------------------
# The trial loop (the driver's, or each --nproc worker's)
# ---------------------------------------------------------------------------------------------------------

def run_trials(search: Search, base_rank: int, worker: int = 0, say: Callable[[str], None] = print) -> None:
    """Ask, train, tell until the study has search.trials scored trials or the timeout has passed (no new trial
    starts after it). A failure in trials.FAILURES is a pruned trial; anything else marks the trial failed, names
    its log and ends the loop (a rerun of the command runs that trial again)."""
    study = open_study(search, worker)
    deadline = None if search.timeout is None else time.monotonic() + search.timeout
    while finished(study) + running(study) < search.trials:
        if deadline is not None and time.monotonic() >= deadline:
            say(f"--timeout {search.timeout:g} s reached: no new trial starts")
            break
        with taking_a_trial(search.folder):
            trial = study.ask()
            trial.set_user_attr("worker", worker)
        try:
            outcome = run_trial(search, trial, base_rank)
        except BaseException as error:
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            log = search.folder / "trials" / f"trial-{trial.number:04d}.log"
            say(f"trial {trial.number}: failed ({type(error).__name__}: {str(error)[:200]}); its output: {log}; "
                "run the same command again to resume (this trial runs again)")
            raise
        record(study, trial, outcome)
        say(progress_line(study, search, trial.number, outcome))
        write_results(search, study)


@contextlib.contextmanager
def taking_a_trial(folder: Path):
    """One worker at a time takes its next trial. Optuna hands out an enqueued trial by reading it `waiting` and then
    marking it `running`; on SQLite (no SELECT ... FOR UPDATE) two --nproc workers can both read it waiting and
    both run it (seen: two workers on trial 0, one failing on the other's output_dir lock). The file lock makes
    the read and the mark one step; it is released before the trial trains."""
    with open(folder / ASK_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def record(study: optuna.Study, trial, outcome: TrialOutcome) -> None:
    trial.set_user_attr("seconds", outcome.seconds)
    trial.set_user_attr("evaluations", outcome.evaluations)
    if outcome.failure:
        trial.set_user_attr("failure", outcome.failure)
    if outcome.pruned_at is not None:
        trial.set_user_attr("pruned_at", outcome.pruned_at)
    if outcome.state == "complete":
        study.tell(trial, outcome.value)
    else:
        study.tell(trial, state=TrialState.PRUNED)


def progress_line(study: optuna.Study, search: Search, number: int, outcome: TrialOutcome) -> str:
    """trial 3 (4/20): accuracy 0.8712, 21 s, learning_rate=3.1e-04 ...; best 0.8800 (trial 1)."""
    keys = study.trials[number].user_attrs.get("keys", {})
    if outcome.state == "complete":
        what = f"{search.metric} {outcome.value:.4f}"
    elif outcome.failure:
        what = f"pruned: {outcome.failure}"
    else:
        last = outcome.evaluations[-1][1] if outcome.evaluations else float("nan")
        what = f"pruned at {outcome.pruned_at}% of its run ({search.metric} {last:.4f} there)"
    best = best_trial(study)
    best_text = f"; best {best.value:.4f} (trial {best.number})" if best is not None else ""
    return (f"trial {number} ({finished(study)}/{search.trials}): {what}, {outcome.seconds:.0f} s, "
            f"{trial_keys_line(keys)}{best_text}")


# ---------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------

def trial_record(t: optuna.trial.FrozenTrial) -> dict:
    attrs = t.user_attrs
    return {"number": t.number, "state": STATES.get(t.state, str(t.state)),
            "value": t.value if t.state == TrialState.COMPLETE else None,
            "params": t.params, "keys": attrs.get("keys", {}), "evaluations": attrs.get("evaluations", []),
            "pruned_at": attrs.get("pruned_at"), "failure": attrs.get("failure"),
            "rerun_of": attrs.get("rerun_of"), "seconds": attrs.get("seconds"), "folder": attrs.get("folder"),
            "worker": attrs.get("worker"), "from_config": bool(attrs.get("from_config"))}


def importance_of(study: optuna.Study) -> dict:
    """How much each searched key explained the scores (Optuna's default evaluator), or why it cannot be told yet."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 3:
        return {"note": f"needs 3 complete trials (has {len(complete)})", "values": {}}
    try:
        with warnings.catch_warnings():   # "importances will be equal" when every trial scored alike: shown as such
            warnings.simplefilter("ignore")
            values = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError, ZeroDivisionError) as e:
        return {"note": f"not computed: {e}", "values": {}}
    clean = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    return {"note": None, "values": clean}


def results_of(search: Search, study: optuna.Study, importance: bool = False) -> dict:
    best = best_trial(study)
    out = {"config": search.config, "overrides": search.overrides, "metric": search.metric,
           "direction": search.direction, "trials_asked": search.trials, "sampler": "TPE (multivariate)",
           "pruner": search.pruner, "evaluations_per_trial": search.evaluations, "space": search.space,
           "validation": study.user_attrs.get("validation"), "storage": DB,
           "trials": [trial_record(t) for t in study.get_trials(deepcopy=False)],
           "best": None if best is None else {"number": best.number, "value": best.value,
                                              "keys": best.user_attrs.get("keys", {}), "params": best.params},
           "search_seconds": study.user_attrs.get("search_seconds"),
           "final": study.user_attrs.get("final")}
    if importance:
        out["importance"] = importance_of(study)
    return out


def write_results(search: Search, study: optuna.Study, importance: bool = False) -> Path:
    """tune_results.json, replaced atomically (a worker writes it after each trial; the driver at the end)."""
    path = search.folder / RESULTS
    tmp = path.with_name(f".{RESULTS}.{os.getpid()}")
    write_json_atomic(tmp, results_of(search, study, importance))
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------------------------
# One search per folder
# ---------------------------------------------------------------------------------------------------------

class SearchLock:
    """OUT/.steadytune-tune.lock: a second `tune` on the same folder is refused while the first lives (its workers
    share the study; a second driver would requeue their running trials). A dead holder's lock is taken over."""

    def __init__(self, folder: Path):
        self.path = folder / LOCK
        self.held = False

    def __enter__(self) -> "SearchLock":
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    holder = json.loads(self.path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    holder = {}
                if isinstance(holder, dict) and holder.get("host") == me["host"] and \
                        lock_holder_alive(holder) is False:
                    print(f"{self.path.parent}: taking over the lock of search process {holder.get('pid')}, which no "
                          "longer runs", file=sys.stderr, flush=True)
                    self.path.unlink(missing_ok=True)
                    continue
                who = f"process {holder.get('pid')} on {holder.get('host')}" if isinstance(holder, dict) else "?"
                raise UserError(f"{self.path.parent}: a search is running there ({who}; lock file {self.path}); wait "
                                "for it, or choose another output_dir") from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise UserError(f"{self.path}: could not take the search's lock")

    def __exit__(self, *exc: Any) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
