"""The search of `steadytune tune`: hyperparameter search on a validation split, then the final model.

    run_search, the driver:  the search's folder (new, resumed, or --fresh) -> the task and the validation split,
             checked before any trial -> the search space (the task's default, --space FILE) -> the study
             (OUT/study.db: new, or resumed with its unfinished trials run again) -> the trials, here or in --nproc
             worker processes, one per GPU -> the best trial's keys as best_config.yaml -> the final model trained
             from it on all the training rows -> one evaluation on the test split, with the baselines, as `eval` does
             -> tune_results.json and tune_report.html

The trials never read the test split: each one trains on the training rows minus a validation split held out of
them (tune_val_size, stratified by label) and is scored there. The test split (eval_dataset, or val_size's split)
is read once, by the final evaluation.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from steadytune.config import ConfigError, as_our_keys, load_config
from steadytune.distributed.launch import resolve_nproc, visible_gpus
from steadytune.errors import UserError
from steadytune.evaluate import evaluate_saved
from steadytune.model.load import load_tokenizer
from steadytune.tune.search_space import ALPHA_RATIO, SearchSpace, Task, check_space, default_space, nest, read_space
from steadytune.tune.trials import ASK_LOCK, LOCK, STUDY_NAME, TRIALS, Search, merge, release_memory, trial_keys_line
from steadytune.report.record import write_run_report
from steadytune.stages.table import STAGES
from steadytune.train import run_training
from steadytune.training.folder_config import load_config_named
from steadytune.training.run_folder import MANIFEST, remove_path

BEST_CONFIG = "best_config.yaml"
FINAL = "final"
SPEC = "tune_search.json"
EVAL_BATCH_ON_GPU = 64   # the trials' evaluation batch on a GPU, where the config sets none (label scoring: 128 in demo)
# What a search writes into its folder: --fresh removes these, and nothing else.
REPORT = "tune_report.html"   # the search's page (report/tuning.py writes it; the same name, checked by a test)
OURS = ("study.db", "study.db-journal", "tune_results.json", BEST_CONFIG, REPORT, SPEC, TRIALS, FINAL,
        LOCK, ASK_LOCK)


def make_search(config: str | Path, overrides: list[str], trials: int = 20, timeout: float | None = None,
                metric: str | None = None, val_size: float = 0.2, evaluations: int = 4, pruner: str = "median",
                seed: int | None = None, force: bool = False) -> Search:
    """The search's settings, each checked with the flag named; output_dir and seed come from the config."""
    if trials < 1:
        raise UserError(f"--trials {trials}: expected 1 or more")
    if timeout is not None and not timeout > 0:
        raise UserError(f"--timeout {timeout:g}: expected a number of seconds above 0")
    if not val_size > 0 or (val_size >= 1 and not float(val_size).is_integer()):
        raise UserError(f"--val-size {val_size:g}: expected a share between 0 and 1, or a whole number of rows")
    if evaluations < 1:
        raise UserError(f"--evaluations {evaluations}: expected 1 or more")
    cfg = load_config_named(config, list(overrides))   # a run folder's run_config.yaml grants nothing
    return Search(config=str(config), overrides=list(overrides), output_dir=cfg.train.output_dir, metric=metric or "",
                  trials=trials, timeout=timeout, val_size=val_size, evaluations=evaluations, pruner=pruner,
                  seed=cfg.train.seed if seed is None else seed, force=force,
                  eval_batch_size=EVAL_BATCH_ON_GPU if visible_gpus() else None)


# ---------------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------------

def run_search(search: Search, space_file: str | None = None, nproc: str = "1", fresh: bool = False,
               final: bool = True) -> dict:
    try:
        # Optuna is the tune extra's dependency (pip install 'steadytune[tune]'): the rest of steadytune runs without it.
        # lazy: the study module imports optuna
        from steadytune.tune import study as studies
    except ImportError as e:
        raise UserError(f"steadytune tune needs optuna ({e}): pip install 'steadytune[tune]'") from None
    workers = resolve_nproc(str(nproc), visible_gpus())
    folder = claim_folder(search.folder, fresh)
    with studies.SearchLock(folder):
        if fresh:   # only once the lock says no other search runs here
            for name in OURS:
                if name != LOCK:
                    remove_path(folder / name)
        task, validation, base_rank = describe_task(search)
        choose_metric(search, task)
        space = choose_space(search, task, space_file)
        search.space = space.to_dict()
        study = studies.open_study(search)
        studies.check_same_search(study, studies.identity_of(search))
        study.set_user_attr("validation", validation)
        again = studies.requeue_unfinished(study)
        first = studies.start_from_config(study, space, search)
        say_plan(search, space, validation, studies.finished(study), again, workers, first)

        started = time.monotonic()
        try:
            if workers == 1:
                studies.run_trials(search, base_rank)
            else:
                run_workers(search, base_rank, workers)
        finally:
            study.set_user_attr("search_seconds", round((study.user_attrs.get("search_seconds") or 0)
                                                         + time.monotonic() - started, 1))
            studies.write_results(search, study, importance=True)
            write_search_report(folder)

        best = studies.best_trial(study)
        if best is None:
            raise UserError(f"no trial completed ({studies.finished(study)} pruned or failed; see "
                            f"{folder / 'tune_results.json'}): widen the space, lower the learning rate's range, or "
                            "run more trials (the same command resumes)")
        print(f"best: trial {best.number}, {search.metric} {best.value:.4f} on the validation split: "
              f"{trial_keys_line(best.user_attrs.get('keys', {}))}", flush=True)
        if final:
            study.set_user_attr("final", train_final(search, space, best, study.user_attrs.get("final")))
        else:   # --no-final: the config a user trains later, all the same
            write_best_config(search.folder / BEST_CONFIG, best_config(search, space, best.user_attrs.get("keys", {})),
                              search, best)
        results = studies.results_of(search, study, importance=True)
        studies.write_results(search, study, importance=True)
        write_search_report(folder)
    say_done(folder, results)
    return results


def write_search_report(folder: Path) -> None:
    """tune_report.html: a view of tune_results.json, so a search runs, and its results stand, without the page's
    libraries (a broken or missing plotly is printed, as a run's report.html is)."""
    try:
        # lazy: report.tuning loads plotly, which the search itself never needs
        from steadytune.report.tuning import write_tune_report
    except ImportError as e:
        print(f"warning: {REPORT} not written ({type(e).__name__}: {e}); try `steadytune report {folder}`",
              file=sys.stderr)
        return
    write_tune_report(folder)


def claim_folder(folder: Path, fresh: bool) -> Path:
    """The search's folder: new, or one holding a search (resumed; with --fresh, removed once its lock is taken). A
    training run's folder, one holding anything else, or one whose study.db (or the search's other names) tune did
    not write, is refused, naming it, and nothing in it is touched: the search would sit among files it did not
    write, and --fresh would delete them."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"output_dir {folder} is a file; the search needs a folder")
    if folder.is_dir():
        entries = {p.name for p in folder.iterdir()}
        if MANIFEST in entries and "study.db" not in entries:
            raise UserError(f"output_dir {folder} holds a training run, not a search: give the search its own folder "
                            f"(output_dir={folder}-tune)")
        foreign = sorted(entries - set(OURS))
        if foreign:
            raise UserError(f"output_dir {folder} holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}, "
                            "which no search wrote; choose a new or empty folder for the search")
        if entries - {LOCK, ASK_LOCK}:   # a search's files (its locks alone: one killed before its study existed)
            problem = study_file_problem(folder / "study.db")
            if problem:
                raise UserError(f"output_dir {folder}: {problem}; tune leaves it alone (nothing is resumed, nothing "
                                "deleted, --fresh included): move it away or choose another output_dir")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"output_dir {folder}: {e.strerror}") from None
    return folder


def study_file_problem(path: Path) -> Optional[str]:
    """Why `path` is not the study a search wrote (None when it is): missing beside the search's other files, a link,
    not an SQLite file, or an SQLite file without exactly one Optuna study named as tune names its own. Read-only:
    nothing is created or changed (sqlite's mode=ro)."""
    if path.is_symlink():
        return f"{path.name} is a symbolic link (to {os.readlink(path)}), not a study tune wrote"
    if not path.is_file():
        return f"it holds files a search writes but no {path.name}: not a search tune can resume"
    try:
        with path.open("rb") as f:
            header = f.read(16)
    except OSError as e:
        return f"{path.name} cannot be read ({e.strerror})"
    if header != b"SQLite format 3\x00":
        return f"{path.name} is not an SQLite database, so not a study tune wrote"
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            names = [row[0] for row in connection.execute("SELECT study_name FROM studies")]
        finally:
            connection.close()
    except sqlite3.Error as e:
        return f"{path.name} is an SQLite database but not an Optuna study that tune wrote ({e})"
    if names != [STUDY_NAME]:
        shown = ", ".join(repr(n)[:60] for n in names[:3]) or "none"
        return f"{path.name} holds other studies than tune's ({shown}; tune writes one, {STUDY_NAME!r})"
    return None


def describe_task(search: Search) -> tuple[Task, dict, int]:
    """The data as the trials will see it, read and checked before any trial (a bad file or key stops here): the
    kind of task, the validation split, and where the test split is (read only by the final evaluation)."""
    cfg = search.trial_config({}, search.folder / TRIALS / "check")
    if not cfg.data.dataset:
        raise UserError("steadytune tune needs training data: set dataset")
    data = STAGES[cfg.method.stage].prepare_data(cfg, load_tokenizer(cfg.model))
    d = cfg.data
    test = (f"eval_dataset {d.eval_dataset}" if d.eval_dataset else
            f"val_size {d.val_size:g} of dataset" if d.val_size > 0 else None)
    counts = data.class_counts or {}
    validation = {"val_size": search.val_size, "train_examples": len(data.train),
                  "validation_examples": len(data.eval or []), "class_counts": counts, "test_split": test}
    task = Task(classification=bool(data.label_names), lora=cfg.method.finetuning_type == "lora",
                class_counts=counts.get("train"), epochs=cfg.train.max_steps <= 0)
    return task, validation, cfg.method.lora_rank


def choose_metric(search: Search, task: Task) -> None:
    if not search.metric:
        search.metric = "accuracy" if task.classification else "eval_loss"
    elif search.metric != "eval_loss" and not task.classification:
        raise UserError(f"--metric {search.metric}: the data is not classification data (no label_names); "
                        "use --metric eval_loss")


def choose_space(search: Search, task: Task, space_file: str | None) -> SearchSpace:
    """The task's default space, changed by --space FILE; every value checked against the config first."""
    space = default_space(task)
    where = "the default space"
    if space_file:
        space = read_space(space_file, space)
        where = space_file
    if ALPHA_RATIO in space.dimensions and not task.lora:
        raise ConfigError(f"{where}: {ALPHA_RATIO} is for finetuning_type: lora")
    check_space(space, lambda keys: search.trial_config(keys, search.folder / TRIALS / "check"), where)
    return space


def say_plan(search: Search, space: SearchSpace, validation: dict, done: int, again: list[int], workers: int,
             first: dict) -> None:
    counts = validation["class_counts"].get("eval")
    split = f" ({', '.join(f'{k} {v}' for k, v in counts.items())})" if counts else ""
    lines = [f"tune: {search.trials} trials ({done} done), {search.metric} on a validation split of "
             f"{validation['validation_examples']} rows{split} held out of {validation['train_examples'] + validation['validation_examples']} "
             f"training rows; test split: {validation['test_split'] or 'none (the final model is not evaluated)'}, "
             "read only by the final evaluation",
             f"  sampler TPE, pruner {search.pruner} at {search.evaluations} evaluations per trial"
             + (f", timeout {search.timeout:g} s" if search.timeout else "")
             + (f", {workers} worker processes" if workers > 1 else "")]
    for key, dim in space.dimensions.items():
        lines.append(f"  {key:30} {dim.describe()}")
    for key, value in space.fixed.items():
        lines.append(f"  {key:30} {value!r} (fixed)")
    lines += [f"  ({note})" for note in space.notes]
    if first:
        lines.append(f"  the first trial: the config's own {', '.join(first)}")
    if again:
        lines.append(f"  resumed: trial(s) {', '.join(map(str, again))} stopped unfinished and run again")
    print("\n".join(lines), flush=True)


# ---------------------------------------------------------------------------------------------------------
# Trials in parallel: --nproc worker processes, one per GPU
# ---------------------------------------------------------------------------------------------------------

def worker_env(index: int, environ: dict) -> dict:
    """Worker `index`'s environment: its one GPU, the index-th of those this process sees (the visibility variable
    already set, HIP_VISIBLE_DEVICES on ROCm, else CUDA_VISIBLE_DEVICES). With no GPU, nothing to narrow."""
    env = dict(environ)
    var = "HIP_VISIBLE_DEVICES" if environ.get("HIP_VISIBLE_DEVICES") else "CUDA_VISIBLE_DEVICES"
    visible = [d.strip() for d in environ.get(var, "").split(",") if d.strip()]
    if visible:
        env[var] = visible[index % len(visible)]
    elif visible_gpus():
        env[var] = str(index % visible_gpus())
    return env


def run_workers(search: Search, base_rank: int, workers: int) -> None:
    """Start `workers` processes sharing the study (each runs trials until the study has enough, or the timeout
    passes), print their lines as they come, and wait. A stopped search stops its workers."""
    spec = search.folder / SPEC
    spec.write_text(json.dumps({**search.to_dict(), "base_rank": base_rank}, indent=1), encoding="utf-8")
    procs = [subprocess.Popen([sys.executable, "-m", "steadytune", "tune", "--worker", f"{spec}:{k}"],
                              env=worker_env(k, os.environ)) for k in range(workers)]
    try:
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()
        raise
    failed = [(k, c) for k, c in enumerate(codes) if c != 0]
    if failed:
        raise UserError("search worker(s) failed: " + ", ".join(f"worker {k} exit {c}" for k, c in failed)
                        + "; their output is above; run the same command again to resume")


def run_worker(spec: Path, index: int) -> int:
    """One worker process of --nproc: the trial loop on the GPU its environment leaves visible."""
    # The driver that started this worker has checked that optuna imports.
    # lazy: the study module imports optuna, the tune extra's dependency
    from steadytune.tune import study as studies

    settings = json.loads(spec.read_text(encoding="utf-8"))
    base_rank = settings.pop("base_rank")
    search = Search(**settings)
    studies.run_trials(search, base_rank, worker=index + 1, say=lambda line: print(f"[worker {index}] {line}",
                                                                                 flush=True))
    return 0


# ---------------------------------------------------------------------------------------------------------
# The final model
# ---------------------------------------------------------------------------------------------------------

def best_config(search: Search, space: SearchSpace, keys: dict) -> dict:
    """The user's keys (a v1 file as its v0 keys), the space's fixed keys and the best trial's keys, for all the
    training rows; evaluated once after training (eval_strategy: no), never selected on the test split."""
    raw, _ = as_our_keys(search.raw_config(), search.config)
    return merge(raw, nest(space.fixed), nest(keys),
                 {"output_dir": str(search.folder / FINAL), "overwrite_output_dir": True, "eval_strategy": "no",
                  "metric_for_best_model": None, "do_eval": False, "do_predict": False,
                  "resume_from_checkpoint": None})


def write_best_config(path: Path, raw: dict, search: Search, best) -> None:
    header = (f"# steadytune tune: the best of {search.trials} trials (trial {best.number}: {search.metric} "
              f"{best.value:.4f} on the validation split).\n# Train it: steadytune train {path}\n")
    path.write_text(header + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True), encoding="utf-8")


def train_final(search: Search, space: SearchSpace, best, earlier: dict | None) -> dict:
    """best_config.yaml, the model trained from it on all the training rows, and one evaluation on the test split
    (accuracy and macro-F1 with the majority and zero-shot baselines, as `steadytune eval --zero-shot`)."""
    keys = best.user_attrs.get("keys", {})
    path = search.folder / BEST_CONFIG
    out = search.folder / FINAL
    if earlier and earlier.get("trial") == best.number and (out / "train_results.json").is_file() and (
            earlier.get("test") is not None or earlier.get("test_split") is None):
        print(f"final model: already trained from trial {best.number}'s keys ({out})", flush=True)
        return earlier
    write_best_config(path, best_config(search, space, keys), search, best)
    cfg = load_config(path)
    print(f"\nfinal model: trial {best.number}'s keys on all the training rows -> {out}", flush=True)
    result = run_training(cfg, force=search.force)
    summary = {"trial": best.number, "config": BEST_CONFIG, "output_dir": FINAL, "keys": keys,
               "train_seconds": round(result.train_seconds, 1), "steps": result.global_step,
               "test_split": "eval_dataset" if cfg.data.eval_dataset else "val_size" if cfg.data.val_size else None,
               "test": None}
    del result
    release_memory()
    if summary["test_split"] is None:
        print("no test split (eval_dataset or val_size): the final model is not evaluated", flush=True)
        return summary
    report = evaluate_saved(cfg, zero_shot=True, batch_size=cfg.train.per_device_eval_batch_size)
    write_run_report(out, announce=False)   # again, with the evaluation
    summary["test"] = compact_test(report)
    return summary


def compact_test(report: dict) -> dict:
    """What the final evaluation found, for tune_results.json: the scores and the baselines beside them."""
    if report.get("task") == "classification":
        primary = report.get("score") or report.get("generate") or {}
        zero = primary.get("zero_shot") or {}
        return {"n": report.get("n"), "accuracy": primary.get("accuracy"), "macro_f1": primary.get("macro_f1"),
                "majority_baseline": (report.get("majority_baseline") or {}).get("accuracy"),
                "zero_shot_accuracy": zero.get("accuracy"), "zero_shot_macro_f1": zero.get("macro_f1")}
    return {k: v for k, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def say_done(folder: Path, results: dict) -> None:
    final = results.get("final") or {}
    test = final.get("test") or {}
    lines = [""]
    if "accuracy" in test:
        lines.append(f"test split ({test['n']} rows): accuracy {test['accuracy']:.4f}, macro-F1 {test['macro_f1']:.4f}"
                     f" (majority class {test['majority_baseline']:.4f}, zero-shot "
                     f"{(test.get('zero_shot_accuracy') or float('nan')):.4f})")
    if final:
        lines.append(f"final model: {folder / FINAL}; its config: {folder / BEST_CONFIG}")
    lines.append(f"results: {folder / 'tune_results.json'}; report: {folder / REPORT}")
    print("\n".join(lines), flush=True)
