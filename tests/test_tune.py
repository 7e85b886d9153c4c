"""`steadytune tune`: the search on a validation split held out of the training rows, its pruner, its failures, resume,
worker processes, the final model evaluated once on the test split, and the pieces it adds to train (the evaluation
hook, eval_steps as a share, tune_val_size, the out-of-memory fault). Tiny random models, a few steps a trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import two_processes

optuna = pytest.importorskip("optuna", reason="steadytune tune needs optuna (the tune extra)")

from steadytune.cli import main  # noqa: E402
from steadytune.config import ConfigError, TrainArguments, load_config  # noqa: E402
from steadytune.data.prepare import prepare_datasets  # noqa: E402
from steadytune.model.load import load_tokenizer  # noqa: E402
from steadytune.model.tiny import save_tiny_model  # noqa: E402
from steadytune.tune import study as studies  # noqa: E402
from steadytune.tune.search_space import (  # noqa: E402
    Dimension,
    SearchSpace,
    Task,
    config_keys,
    default_space,
    read_space,
)
from steadytune.tune.search import make_search, run_search, worker_env  # noqa: E402
from steadytune.train import run_training  # noqa: E402
from steadytune.training.evaluation import should_evaluate  # noqa: E402
from steadytune.training.stopping import RunPruned  # noqa: E402

NEG = ["太差了", "很失望", "再也不买了", "包装破损", "讨厌"]
POS = ["很好", "质量不错", "非常满意", "物流很快", "喜欢"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2", seed=0)


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def reviews(k: int = 4) -> list[dict]:
    """k copies of 5 negative and 5 positive reviews, each copy numbered (so no two rows are the same text)."""
    return [{"text": f"{t} {i}", "label": label} for i in range(k)
            for label, texts in (("消极", NEG), ("积极", POS)) for t in texts]


def write_config(tmp_path: Path, tiny: Path, **keys) -> Path:
    """A classification run on 40 training reviews and 10 test reviews, 6 steps."""
    train = write_rows(tmp_path / "train.jsonl", reviews(4))
    test = write_rows(tmp_path / "test.jsonl", [{"text": f"{r['text']} 测试", "label": r["label"]} for r in reviews(1)])
    cfg = {"model_name_or_path": str(tiny), "dataset": str(train), "eval_dataset": str(test), "template": "empty",
           "label_names": ["消极", "积极"], "prompt_template": "评论：{text}情感：", "cutoff_len": 32,
           "per_device_train_batch_size": 4, "max_steps": 6, "learning_rate": 1e-2, "logging_steps": 3,
           "plot_loss": False, "output_dir": str(tmp_path / "search"), **keys}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def write_space(path: Path, space: dict) -> Path:
    path.write_text(yaml.safe_dump(space, allow_unicode=True), encoding="utf-8")
    return path


def results_of(folder: Path) -> dict:
    return json.loads((folder / "tune_results.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------------
# What tune adds to train: the evaluation hook, eval_steps as a share, tune_val_size, the out-of-memory fault
# ---------------------------------------------------------------------------------------------------------

def test_eval_steps_below_one_is_a_share_of_the_run():
    t = TrainArguments(eval_strategy="steps", eval_steps=0.25)
    assert [s for s in range(1, 9) if should_evaluate(t, s, 8, 8)] == [2, 4, 6, 8]
    assert [s for s in range(1, 4) if should_evaluate(t, s, 3, 3)] == [1, 2, 3]
    assert load_config(None, ["eval_strategy=steps", "eval_steps=4"]).train.eval_steps == 4
    with pytest.raises(ConfigError, match="eval_steps: 1.5 is neither"):
        load_config(None, ["eval_steps=1.5"])


def test_the_evaluation_hook_stops_a_run_as_pruned(tmp_path, tiny):
    cfg = load_config(write_config(tmp_path, tiny), ["eval_strategy=steps", "eval_steps=0.5", "tune_val_size=0.25",
                                                     f"output_dir={tmp_path / 'run'}"])
    seen = []

    def hook(step, total, results):
        seen.append((step, total, sorted(results)))
        return True

    with pytest.raises(RunPruned):
        run_training(cfg, force=True, progress=False, on_evaluate=hook)
    assert seen == [(3, 6, ["eval_accuracy", "eval_loss", "eval_macro_f1"])]
    manifest = json.loads((tmp_path / "run" / ".steadytune-run.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "pruned" and not list((tmp_path / "run").glob("checkpoint-*"))


def test_tune_val_size_holds_rows_out_of_training_by_label_and_leaves_the_test_split_unread(tmp_path, tiny):
    path = write_config(tmp_path, tiny)
    tokenizer = load_tokenizer(load_config(path).model)
    # eval_dataset names a file that does not exist: with tune_val_size it is never opened.
    cfg = load_config(path, [f"eval_dataset={tmp_path / 'missing.jsonl'}", "tune_val_size=0.25"])
    data = prepare_datasets(cfg, tokenizer)
    assert len(data.train) == 30 and len(data.eval) == 10
    assert data.class_counts["eval"] == {"消极": 5, "积极": 5}
    assert not {e["text"] for e in data.train} & {e["text"] for e in data.eval}
    # The test split as val_size: validation rows come from what is left after it, never from it.
    both = prepare_datasets(load_config(path, ["eval_dataset=null", "val_size=10", "tune_val_size=10"]), tokenizer)
    test = prepare_datasets(load_config(path, ["eval_dataset=null", "val_size=10"]), tokenizer)
    assert not {e["text"] for e in test.eval} & ({e["text"] for e in both.train} | {e["text"] for e in both.eval})
    assert len(both.train) == 20 and {e["text"] for e in both.train} | {e["text"] for e in both.eval} == \
        {e["text"] for e in test.train}


def test_fault_injection_oom_step_raises_out_of_memory(tmp_path, tiny):
    import torch
    cfg = load_config(write_config(tmp_path, tiny), ["fault_injection.oom_step=2", f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(torch.OutOfMemoryError, match="out of memory at step 2"):
        run_training(cfg, force=True, progress=False)


# ---------------------------------------------------------------------------------------------------------
# The search space
# ---------------------------------------------------------------------------------------------------------

def test_the_default_space_depends_on_the_task():
    balanced = default_space(Task(classification=True, lora=True, class_counts={"a": 50, "b": 50}))
    assert {"learning_rate", "num_train_epochs", "lora_rank", "lora_alpha_ratio", "per_device_train_batch_size",
            "warmup_ratio", "lora_dropout", "weight_decay"} == set(balanced.dimensions)
    assert balanced.dimensions["learning_rate"].log and "class_balance not searched" in balanced.notes[0]
    imbalanced = default_space(Task(classification=True, lora=True, class_counts={"a": 80, "b": 20}))
    assert imbalanced.dimensions["class_balance"].choices == ("none", "sampler", "loss")
    full = default_space(Task(classification=False, lora=False, epochs=False))
    assert not {"lora_rank", "lora_alpha_ratio", "lora_dropout", "num_train_epochs", "class_balance"} & set(full.dimensions)
    assert full.dimensions["learning_rate"].high == 1e-4
    assert config_keys({"lora_rank": 16, "lora_alpha_ratio": 0.5}, 8) == {"lora_rank": 16, "lora_alpha": 8.0}
    assert config_keys({"lora_alpha_ratio": 2}, 8) == {"lora_alpha": 16.0}


def test_every_key_tune_sets_in_a_trial_is_refused_in_a_space(tmp_path):
    """The keys trial_config sets over the user's are exactly among those a space may not name."""
    from dataclasses import fields

    from steadytune.tune.search_space import NOT_SEARCHABLE
    from steadytune.tune.trials import Search

    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: m\ndataset: d\n", encoding="utf-8")
    search = Search(config=str(config), overrides=[], output_dir=str(tmp_path / "s"), metric="eval_loss", trials=2,
                    val_size=0.1, evaluations=2, space=SearchSpace({"learning_rate": Dimension("learning_rate", 1e-4,
                                                                                                  1e-3)}).to_dict())
    plain = load_config(config, {})
    trial = search.trial_config({"learning_rate": 5e-4}, tmp_path / "s" / "trial_0")
    changed = {f.name for section in ("train", "data", "method") for f in fields(getattr(plain, section))
               if getattr(getattr(trial, section), f.name) != getattr(getattr(plain, section), f.name)}
    assert changed - {"learning_rate"} <= set(NOT_SEARCHABLE), changed - set(NOT_SEARCHABLE)


def test_a_space_file_changes_the_default(tmp_path):
    base = default_space(Task(classification=True, lora=True, class_counts={"a": 1, "b": 1}))
    space = read_space(write_space(tmp_path / "s.yaml", {
        "learning_rate": {"low": "1e-5", "high": 1e-3, "log": True}, "lora_dropout": None, "lora_rank": [8, 16],
        "num_train_epochs": {"low": 1, "high": 4}, "guard.window": [20, 40], "lora_target": "q_proj,v_proj"}), base)
    assert space.dimensions["learning_rate"] == Dimension("learning_rate", 1e-5, 1e-3, log=True)
    assert space.dimensions["num_train_epochs"].integer and space.dimensions["lora_rank"].choices == (8, 16)
    assert "lora_dropout" not in space.dimensions and space.fixed == {"lora_target": "q_proj,v_proj"}
    assert "guard.window" in space.dimensions and "weight_decay" in space.dimensions
    alone = read_space(write_space(tmp_path / "t.yaml", {"default_space": False, "learning_rate": [1e-3, 1e-2]}), base)
    assert list(alone.dimensions) == ["learning_rate"]
    assert SearchSpace.from_dict(space.to_dict()).dimensions == space.dimensions


@pytest.mark.parametrize("entry,message", [
    ({"lerning_rate": [1e-3]}, "lerning_rate: not a config key"),
    ({"learning_rate": {"low": 1e-2, "high": 1e-3}}, "learning_rate: low 0.01 must be below high 0.001"),
    ({"learning_rate": {"low": 0, "high": 1e-3, "log": True}}, "a log range needs low > 0"),
    ({"learning_rate": {"low": 1e-4, "hi": 1e-3}}, "unknown setting 'hi'"),
    ({"lora_rank": []}, "lora_rank: an empty list"),
    ({"default_space": False, "lora_rank": None}, "nothing left to search"),
    # issue 67: printed as the best trial's key, to no effect (tune gives every trial its own folder)
    ({"output_dir": ["/tmp/a", "/tmp/b"]}, r"output_dir: not a key to search \(tune gives each trial its own folder"),
    ({"output_dir": "/tmp/elsewhere"}, "output_dir: not a key to search"),
    ({"logging_steps": [1, 5]}, "logging_steps: not a key to search .it changes no score"),
    ({"report_to": ["wandb", "none"]}, "report_to: not a key to search"),
    ({"metric_for_best_model": ["eval_loss"]}, "metric_for_best_model: not a key to search .the search's metric is "
                                               "--metric"),
])
def test_a_wrong_space_entry_names_the_file_and_the_key(tmp_path, entry, message):
    path = write_space(tmp_path / "space.yaml", entry)
    with pytest.raises(ConfigError, match=message) as caught:
        read_space(path, default_space(Task(classification=True, lora=True)))
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_bad_requests_stop_with_one_line_naming_the_flag_key_or_file(tmp_path, tiny, capsys):
    config = write_config(tmp_path, tiny)

    def error_of(*argv) -> str:
        assert main(["tune", *map(str, argv)]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: ")
        return err

    assert "--trials 0: expected 1 or more" in error_of(config, "--trials", "0")
    assert "--val-size 1.5" in error_of(config, "--val-size", "1.5")
    space = write_space(tmp_path / "space.yaml", {"lora_rank": [8, 0]})
    assert "lora_rank: 0 does not make a valid config" in error_of(config, "--space", space, "--no-final")
    assert "not a config key" in error_of(config, "--space", write_space(tmp_path / "s2.yaml", {"lr": [1]}))
    alpaca = write_rows(tmp_path / "alpaca.jsonl", [{"instruction": f"Say {i}", "output": str(i)} for i in range(12)])
    assert "--metric accuracy: the data is not classification data" in error_of(
        config, f"dataset={alpaca}", "eval_dataset=null", "label_names=null", "prompt_template=null",
        f"output_dir={tmp_path / 'gen'}", "--metric", "accuracy")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine", encoding="utf-8")
    assert "holds notes.txt, which no search wrote" in error_of(config, f"output_dir={tmp_path / 'theirs'}")
    assert "config file not found" in error_of(tmp_path / "missing.yaml")


def test_a_study_db_tune_did_not_write_is_refused_named_and_never_deleted(tmp_path, tiny, capsys):
    """Issue 54 class 3: the user's own SQLite file named study.db, a corrupt one, another tool's Optuna study, a link,
    or the search's other names without a study: refused in one line naming study.db, --fresh included, and every
    byte left as it was."""
    import sqlite3

    import optuna

    config = write_config(tmp_path, tiny)

    def sqlite_of(path: Path, statements: str) -> None:
        connection = sqlite3.connect(path)
        connection.executescript(statements)
        connection.commit()
        connection.close()

    cases = {}
    mine = tmp_path / "mine"
    mine.mkdir()
    sqlite_of(mine / "study.db", "CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('my notes');")
    cases[mine] = "not an Optuna study that tune wrote"
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "study.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    cases[corrupt] = "study.db is an SQLite database but not an Optuna study"
    other = tmp_path / "other"
    other.mkdir()
    optuna.create_study(storage=f"sqlite:///{other / 'study.db'}", study_name="their-study")
    cases[other] = "holds other studies than tune's ('their-study'"
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "study.db").symlink_to(mine / "study.db")
    cases[linked] = "study.db is a symbolic link"
    without = tmp_path / "without"
    without.mkdir()
    (without / "best_config.yaml").write_text("learning_rate: 1e-4\n", encoding="utf-8")
    cases[without] = "no study.db"
    before = {folder: {p.name: (p.read_bytes() if p.is_file() else None) for p in folder.iterdir()} for folder in cases}
    for folder, said in cases.items():
        for fresh in ([], ["--fresh"]):
            capsys.readouterr()
            assert main(["tune", str(config), f"output_dir={folder}", *fresh]) == 1
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and said in err and "leaves it alone" in err, (folder, err)
        assert {p.name: (p.read_bytes() if p.is_file() else None) for p in folder.iterdir()} == before[folder]


# ---------------------------------------------------------------------------------------------------------
# A whole search
# ---------------------------------------------------------------------------------------------------------

def enqueue(search, space: SearchSpace, params: list[dict]) -> None:
    """Fix the order of a test search's first trials (the study as `tune` opens it, with the space it will search)."""
    search.space = space.to_dict()
    (search.folder).mkdir(parents=True, exist_ok=True)
    study = studies.open_study(search)
    for p in params:
        study.enqueue_trial(p)


def test_a_search_prunes_records_a_failure_and_trains_the_best_on_all_rows_once(tmp_path, tiny, capsys):
    """Five trials in a fixed order: two good ones, one the median pruner stops at its second evaluation (a learning
    rate too small to lower the validation loss), one that runs out of memory and one whose loss turns NaN (each
    recorded, and pruned: the search goes on). The best
    trial's keys become best_config.yaml; the final model trains on all 40 rows and is scored once on the test
    split, with the majority and zero-shot baselines."""
    config = write_config(tmp_path, tiny, guard_policy="off")
    space_file = write_space(tmp_path / "space.yaml", {
        "default_space": False, "learning_rate": [1e-2, 1e-7], "fault_injection.oom_step": [None, 2],
        "fault_injection.nan_loss_step": [None, 2]})
    hostile = "run_name=<img src=x onerror=alert(1)>"   # shown on the page: as text, never as markup
    search = make_search(config, ["seed=3", hostile], trials=5, metric="eval_loss", evaluations=4, pruner="median")
    space = read_space(space_file, SearchSpace())
    fine = {"fault_injection.oom_step": None, "fault_injection.nan_loss_step": None}
    enqueue(search, space, [{"learning_rate": 1e-2, **fine}, {"learning_rate": 1e-2, **fine},
                            {"learning_rate": 1e-7, **fine},
                            {"learning_rate": 1e-2, **fine, "fault_injection.oom_step": 2},
                            {"learning_rate": 1e-2, **fine, "fault_injection.nan_loss_step": 2}])
    results = run_search(search, space_file=str(space_file))
    out = capsys.readouterr().out
    folder = tmp_path / "search"
    trials = {t["number"]: t for t in results["trials"]}
    assert [trials[n]["state"] for n in range(5)] == ["complete", "complete", "pruned", "pruned", "pruned"]
    # 6 steps, evaluations every 2 (eval_steps 0.25 rounded up): at 33 %, 67 %, 100 % (25, 75, 100 on the grid)
    assert trials[2]["pruned_at"] == 67 and trials[2]["failure"] is None
    assert [p for p, _ in trials[2]["evaluations"]] == [33, 67]
    assert trials[3]["failure"].startswith("out of memory") and trials[3]["evaluations"] == []
    assert trials[4]["failure"] == "non-finite: eval_loss is nan at step 2 of 6"   # guard_policy off: NaN trained on
    assert "trial 2 (3/5): pruned at 67% of its run" in out and "trial 3 (4/5): pruned: out of memory" in out
    assert results == results_of(folder) and results["best"]["number"] in (0, 1)
    # The validation split: 8 of the 40 training rows (20 %, by label); the test split named, read only at the end.
    assert results["validation"]["validation_examples"] == 8 and results["validation"]["train_examples"] == 32
    assert results["validation"]["class_counts"]["eval"] == {"消极": 4, "积极": 4}
    assert results["validation"]["test_split"] == f"eval_dataset {tmp_path / 'test.jsonl'}"
    for n in range(5):   # each trial's folder keeps its logs, not its weights
        kept = {p.name for p in (folder / "trials" / f"trial-{n:04d}").iterdir()}
        assert "run_config.yaml" in kept and not kept & {"adapter_model.safetensors", "tokenizer.json", "report.html"}
        trial_cfg = yaml.safe_load((folder / "trials" / f"trial-{n:04d}" / "run_config.yaml").read_text("utf-8"))
        assert trial_cfg["tune_val_size"] == 0.2 and trial_cfg["eval_steps"] == 0.25
    # best_config.yaml trains the final model: the user's keys and the best keys, on every training row.
    best = load_config(folder / "best_config.yaml")
    assert best.train.learning_rate == 1e-2 and best.train.seed == 3 and best.data.tune_val_size == 0
    assert best.fault_injection.oom_step is None and best.train.eval_strategy == "no"
    final = results["final"]
    assert final["trial"] == results["best"]["number"] and final["steps"] == 6
    assert final["test"]["n"] == 10 and final["test"]["majority_baseline"] == 0.5
    assert final["test"]["zero_shot_accuracy"] is not None and 0 <= final["test"]["accuracy"] <= 1
    evaluated = json.loads((folder / "final" / "eval_results.json").read_text(encoding="utf-8"))
    assert evaluated["n"] == 10 and (folder / "final" / "adapter_model.safetensors").is_file()
    train_stats = json.loads((folder / "final" / "data_stats.json").read_text(encoding="utf-8"))
    assert train_stats["train"]["examples"] == 40   # the validation rows are trained on in the end
    page = (folder / "tune_report.html").read_text(encoding="utf-8")
    for chart in ("fig-history", "fig-evaluations"):
        assert chart in page
    assert "Final model, evaluated once on the test split" in page and "out of memory" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    (folder / "tune_report.html").unlink()
    assert main(["report", str(folder)]) == 0 and (folder / "tune_report.html").is_file()
    # The same command again: the search is done and its final model stands.
    again = run_search(make_search(config, ["seed=3", hostile], trials=5, metric="eval_loss"),
                       space_file=str(space_file))
    assert "final model: already trained from trial" in capsys.readouterr().out
    assert again["final"] == final and len(again["trials"]) == 5


def test_a_resumed_search_must_be_the_same_search(tmp_path, tiny, capsys):
    config = write_config(tmp_path, tiny)
    space_file = write_space(tmp_path / "space.yaml", {"default_space": False, "learning_rate": [1e-2, 1e-3]})
    run_search(make_search(config, [], trials=1), space_file=str(space_file), final=False)
    with pytest.raises(Exception, match=r"holds a search with other settings \(cutoff_len: 32 -> 24"):
        run_search(make_search(config, ["cutoff_len=24"], trials=2), space_file=str(space_file), final=False)
    capsys.readouterr()
    results = run_search(make_search(config, ["cutoff_len=24"], trials=1), space_file=str(space_file), final=False,
                         fresh=True)
    assert len(results["trials"]) == 1 and results["final"] is None


def test_a_killed_search_resumes_and_runs_the_killed_trial_again(tmp_path, tiny):
    """SIGKILL while trial 1 trains (its log exists): the study keeps trial 0 and trial 1 `running`; the same command
    again takes over the dead process's lock, marks trial 1 failed, runs its keys again, and finishes the search."""
    config = write_config(tmp_path, tiny, max_steps=20)
    space_file = write_space(tmp_path / "space.yaml", {"default_space": False, "learning_rate": [1e-2, 1e-3, 1e-4]})
    cmd = [sys.executable, "-m", "steadytune", "tune", str(config), "--trials", "3", "--space", str(space_file),
           "--no-final"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    log = tmp_path / "search" / "trials" / "trial-0001.log"
    deadline = time.monotonic() + 120
    while not log.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert log.exists(), proc.stdout.read().decode()
    assert (tmp_path / "search" / ".steadytune-tune.lock").exists()   # the dead process's
    killed = optuna.load_study(study_name=studies.STUDY_NAME, storage=studies.storage_of(tmp_path / "search"))
    assert [t.state.name for t in killed.get_trials()] == ["COMPLETE", "RUNNING"]
    keys = killed.trials[1].params

    search = make_search(config, [], trials=3)
    results = run_search(search, space_file=str(space_file), final=False)
    states = [(t["number"], t["state"], t["rerun_of"]) for t in results["trials"]]
    assert states[:2] == [(0, "complete", None), (1, "fail", None)] and states[2] == (2, "complete", 1)
    assert results["trials"][2]["params"] == keys and len(states) == 4 and states[3][1] == "complete"
    assert not (tmp_path / "search" / ".steadytune-tune.lock").exists()


def test_worker_env_gives_each_worker_one_of_the_visible_gpus():
    assert worker_env(1, {"CUDA_VISIBLE_DEVICES": "2,3"})["CUDA_VISIBLE_DEVICES"] == "3"
    rocm = worker_env(0, {"HIP_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert rocm["HIP_VISIBLE_DEVICES"] == "4" and rocm["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in worker_env(1, {"PATH": "/bin"})   # this CPU machine: nothing to narrow


@two_processes
def test_trials_run_in_parallel_worker_processes_sharing_the_study(tmp_path, tiny, capfd):
    """--nproc 2 on a CPU: two worker processes (one per GPU on a GPU machine) take trials from one SQLite study
    until it has --trials scored trials; the driver then trains the final model."""
    config = write_config(tmp_path, tiny, max_steps=4)
    space_file = write_space(tmp_path / "space.yaml", {"default_space": False, "learning_rate": [1e-2, 1e-3],
                                                       "lora_rank": [4, 8]})
    results = run_search(make_search(config, [], trials=2), space_file=str(space_file), nproc="2")
    out = capfd.readouterr().out   # the workers' lines come from their own processes
    assert [t["state"] for t in results["trials"]] == ["complete", "complete"]
    assert {t["worker"] for t in results["trials"]} == {1, 2}   # one trial each, at the same time
    assert "[worker 0] trial" in out and "[worker 1] trial" in out
    assert results["final"]["test"]["n"] == 10


def test_demo_tune_searches_the_embedded_recipe(tmp_path, tiny, capsys, monkeypatch):
    """`steadytune demo --tune` with the recipe's keys pointed at a tiny model and tiny data: the search, then the
    best recipe trained and scored, in output_dir + '-tune'."""
    monkeypatch.chdir(tmp_path)
    train = write_rows(tmp_path / "train.jsonl", reviews(4))
    test = write_rows(tmp_path / "test.jsonl", reviews(1))
    code = main(["demo", "--tune", "--trials", "2", "--force", f"model_name_or_path={tiny}", f"dataset={train}",
                 f"eval_dataset={test}", "template=empty", "cutoff_len=96", "max_steps=4", "max_samples=null",
                 "max_eval_samples=null"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "tune: 2 trials" in out and "num_train_epochs not searched" in out
    results = results_of(tmp_path / "saves" / "demo-gemma3-270m-sentiment-tune")
    assert len(results["trials"]) == 2 and results["final"]["test"]["n"] == 10
    assert "class_balance" not in results["space"]["search"]   # the reviews are balanced


def test_the_pruners_work_on_the_grid_of_evaluations():
    median = studies.make_pruner("median", 20, 4)
    assert isinstance(median, optuna.pruners.MedianPruner) and median._n_warmup_steps == 26   # not at 25 %
    halving = studies.make_pruner("halving", 20, 4)
    assert isinstance(halving, optuna.pruners.SuccessiveHalvingPruner) and halving._min_resource == 50
    assert isinstance(studies.make_pruner("none", 20, 4), optuna.pruners.NopPruner)
    assert [studies.startup_trials(n) for n in (1, 9, 30, 100)] == [2, 3, 10, 10]


def test_trials_evaluate_in_bigger_batches_on_a_gpu_unless_the_config_says(tmp_path, tiny):
    """On a GPU (make_search sets eval_batch_size there) the trials' several evaluations use 64 rows a batch, not
    the default 8; a config that sets per_device_eval_batch_size keeps it. The identity of a search ignores it."""
    config = write_config(tmp_path, tiny)
    search = make_search(config, [], trials=1)
    assert search.eval_batch_size is None   # this CPU
    search.eval_batch_size = 64
    assert search.trial_config({}, tmp_path / "t").train.per_device_eval_batch_size == 64
    search.overrides = ["per_device_eval_batch_size=16"]
    assert search.trial_config({}, tmp_path / "t").train.per_device_eval_batch_size == 16
    assert "per_device_eval_batch_size" not in studies.identity_of(search)["config"]


def test_a_search_runs_without_the_pages_libraries(tmp_path, tiny):
    """plotly draws tune_report.html, a view of tune_results.json: without it (a broken install, a bare GPU machine)
    the search still runs and writes its results and best config, and says the page was not written."""
    config = write_config(tmp_path, tiny)
    code = ("import sys; sys.modules['plotly'] = None; from steadytune.cli import main; "
            f"sys.exit(main(['tune', {str(config)!r}, '--trials', '1', '--no-final', '--evaluations', '2']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "search"
    assert results_of(folder)["trials"][0]["state"] == "complete"
    assert (folder / "best_config.yaml").is_file() and not (folder / "tune_report.html").exists()
    assert "tune_report.html not written" in done.stderr


def test_the_search_and_its_page_name_the_same_file():
    from steadytune.tune.search import REPORT
    from steadytune.report.tuning import REPORT as PAGE
    assert REPORT == PAGE


def test_the_folder_files_a_search_owns_include_its_locks():
    from steadytune.tune.search import OURS
    assert {studies.LOCK, studies.ASK_LOCK} <= set(OURS)


@two_processes
def test_workers_taking_trials_at_once_never_take_the_same_one(tmp_path):
    """Four processes take enqueued trials from one SQLite study at the same moment; each trial goes to one of
    them (study.taking_a_trial: optuna's read-then-mark of a waiting trial is not atomic on SQLite)."""
    storage = f"sqlite:///{tmp_path / studies.DB}"
    study = optuna.create_study(storage=storage, study_name="s")
    for i in range(24):
        study.enqueue_trial({"x": float(i)})
    code = ("import sys, time; from pathlib import Path; import optuna; from steadytune.tune import study as s\n"
            f"st = optuna.load_study(study_name='s', storage={storage!r})\n"
            "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
            "for _ in range(6):\n"
            f"    with s.taking_a_trial(Path({str(tmp_path)!r})):\n"
            "        t = st.ask()\n"
            "    print(t.number, flush=True)\n")
    start = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", code, start], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    # four cold imports of torch + transformers on a loaded 2-core CI machine took over 120 s once; this checks
    # who takes which trial, not speed
    taken = [int(line) for p in procs for line in p.communicate(timeout=600)[0].split()]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(taken) == list(range(24))
