"""report_to: LLaMA-Factory's values, a clear error for a tracker that is not installed, and TensorBoard and
trackio runs written offline with the same numbers as metrics.jsonl."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from steadytune.config import TRACKER_PACKAGES, ConfigError, load_config, parse_report_to, tracker_installed
from steadytune.errors import UserError
from steadytune.model.tiny import save_tiny_model
from steadytune.training.trackers import Trackers

REPO = Path(__file__).resolve().parents[1]


def test_report_to_takes_llamafactory_values():
    assert parse_report_to("none") == [] and parse_report_to(["none"]) == [] and parse_report_to(None) == []
    assert parse_report_to("tensorboard") == ["tensorboard"]
    assert parse_report_to("wandb, tensorboard") == ["wandb", "tensorboard"]
    assert parse_report_to(["trackio", "tensorboard", "trackio"]) == ["trackio", "tensorboard"]
    assert parse_report_to("all") == [name for name in TRACKER_PACKAGES if tracker_installed(name)]
    with pytest.raises(ValueError, match="unknown tracker 'neptune'"):
        parse_report_to(["tensorboard", "neptune"])
    cfg = load_config(None, ["report_to=[tensorboard, trackio]", "logging_dir=tb"])
    assert cfg.train.report_to == ["tensorboard", "trackio"] and cfg.train.logging_dir == "tb"
    with pytest.raises(ConfigError, match="report_to: unknown tracker"):
        load_config(None, ["report_to=tensorbord"])


def test_a_tracker_that_is_not_installed_is_an_error_naming_the_package(tmp_path):
    missing = next((name for name in TRACKER_PACKAGES if not tracker_installed(name)), None)
    if missing is None:
        pytest.skip("every supported tracker is installed here")
    with pytest.raises(UserError, match=f"report_to: {missing} needs the {TRACKER_PACKAGES[missing]} package"):
        Trackers([missing], tmp_path)


def test_default_logging_dir_is_transformers_one(tmp_path):
    trackers = Trackers("none", tmp_path / "run")
    assert trackers.log_with() is None
    assert trackers.logging_dir.parent == tmp_path / "run" / "runs"


def test_tensorboard_and_trackio_log_offline_what_metrics_jsonl_holds(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (the dev extra has it)")
    pytest.importorskip("trackio", reason="trackio is not installed (the dev extra has it)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = save_tiny_model(tmp_path / "model", "qwen2")
    rows = [{"text": f"review {i} " + ("good" if i % 2 else "bad"), "label": "pos" if i % 2 else "neg"}
            for i in range(32)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    out, logs = tmp_path / "tracked", tmp_path / "tb"
    config = tmp_path / "tracked.yaml"
    config.write_text("\n".join([
        f"model_name_or_path: {model}", f"dataset: {data}", "label_names: [neg, pos]", "prompt_template: '{text} ->'",
        "template: empty", f"output_dir: {out}", "per_device_train_batch_size: 4", "max_steps: 5", "logging_steps: 1",
        "val_size: 8", "eval_strategy: steps", "eval_steps: 5", "report_to: [tensorboard, trackio]",
        f"logging_dir: {logs}"]), encoding="utf-8")
    # trackio reads TRACKIO_DIR when imported, so the run goes in a process of its own; no network is needed.
    env = dict(os.environ, TRACKIO_DIR=str(tmp_path / "trackio"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "steadytune", "train", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    losses = {r["step"]: r["loss"] for r in metrics if "loss" in r}
    evals = {r["step"]: r["eval_loss"] for r in metrics if "eval_loss" in r}
    assert sorted(losses) == [1, 2, 3, 4, 5] and list(evals) == [5]

    events = EventAccumulator(str(logs))
    events.Reload()
    assert {"train/loss", "train/learning_rate", "train/grad_norm", "eval/loss", "eval/accuracy"} <= set(events.Tags()["scalars"])
    tb_losses = {e.step: e.value for e in events.Scalars("train/loss")}
    assert tb_losses == pytest.approx(losses, rel=1e-6)
    assert events.Scalars("eval/loss")[0].value == pytest.approx(evals[5], rel=1e-6)

    with sqlite3.connect(tmp_path / "trackio" / "steadytune.db") as db:
        logged = [(step, json.loads(blob)) for step, blob in
                  db.execute("SELECT step, metrics FROM metrics WHERE run_name = ? ORDER BY id", (out.name,))]
    tracked = {step: m["train/loss"] for step, m in logged if "train/loss" in m}
    assert tracked == pytest.approx(losses, rel=1e-12)
    assert any(m.get("eval/loss") == pytest.approx(evals[5]) for _, m in logged)
