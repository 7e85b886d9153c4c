"""Reliability: nothing of the user's is lost, signals stop a run cleanly, a resume is the same run, and the
environment's faults and silent mistakes end in one clear line (never a traceback). Tiny models on CPU.

Each test names the case it covers; README "Reliability" lists them as a table."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import peft.peft_model
import pytest
import safetensors
import torch
import yaml
from sample_data import ALPACA, classification_rows, sample_dir

from steadytune.cli import main as cli_main
from steadytune.config import ConfigError, load_config
from steadytune.errors import CheckpointError, UserError
from steadytune.model.tiny import save_tiny_model
from steadytune.model.archive import sha256_file
from steadytune.train import run_training
from steadytune.training import checkpoint as ckpt
from steadytune.training.checkpoint import latest_checkpoint, list_checkpoints, load_torch_state, read_state
from steadytune.training.run_folder import LOCK, MANIFEST, read_manifest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "qwen2", "qwen2")


def settings(model: Path, out: Path, **extra) -> dict:
    base = {"model_name_or_path": str(model), "dataset": ALPACA, "dataset_dir": str(sample_dir()),
            "template": "qwen", "cutoff_len": 96, "max_samples": 32, "output_dir": str(out),
            "per_device_train_batch_size": 4, "learning_rate": 5e-3, "max_steps": 4, "logging_steps": 1,
            "save_steps": 2, "lora_rank": 4, "seed": 3}
    base.update(extra)
    return base


def train(model: Path, out: Path, **extra):
    return run_training(load_config(None, settings(model, out, **extra)), progress=False)


def write_yaml(path: Path, values: dict) -> Path:
    path.write_text(yaml.safe_dump(values, allow_unicode=True), encoding="utf-8")
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    """`steadytune ARGS` in this process (what the console script runs), its output captured. An exception that
    is not a user error would escape and fail the test: that is the traceback a user would have seen."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return subprocess.CompletedProcess(["steadytune", *args], code, out.getvalue(), err.getvalue())


def one_line_error(proc: subprocess.CompletedProcess, code: int = 1) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-2000:]
    return errors[0]


# --- 2. nothing of the user's is lost ------------------------------------------------------------------------

def test_overwrite_refuses_to_replace_files_no_run_wrote(tiny, tmp_path):
    out = tmp_path / "mine"
    (out / "checkpoint-7").mkdir(parents=True)
    (out / "checkpoint-7" / "notes.txt").write_text("my own checkpoint")
    (out / "tokenizer.json").write_text("{}")
    (out / "README.md").write_text("# my model\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(UserError, match=r"checkpoint-7.*tokenizer\.json|README\.md") as info:
        train(tiny, out, overwrite_output_dir=True)
    assert "no steadytune run wrote" in str(info.value)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before   # untouched, no lock left


def test_overwrite_replaces_an_earlier_runs_files_and_keeps_the_users(tiny, tmp_path):
    out = tmp_path / "run"
    train(tiny, out)
    (out / "my_notes.txt").write_text("keep me")
    first = (out / "adapter_model.safetensors").read_bytes()
    with pytest.raises(UserError, match="not empty"):
        train(tiny, out, seed=4)
    train(tiny, out, seed=4, overwrite_output_dir=True)
    assert (out / "my_notes.txt").read_text() == "keep me"
    assert (out / "adapter_model.safetensors").read_bytes() != first
    manifest = read_manifest(out)
    assert manifest["status"] == "finished" and "my_notes.txt" not in manifest["files"]
    assert "adapter_model.safetensors" in manifest["files"] and not (out / LOCK).exists()


def test_resume_from_another_folders_checkpoint_does_not_clobber_this_one(tiny, tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    train(tiny, source)
    checkpoint = list_checkpoints(source)[-1]
    target.mkdir()
    (target / "results.csv").write_text("a,b\n")
    (target / "adapter_config.json").write_text("{}")   # a user's file with a name the run writes
    with pytest.raises(UserError, match="adapter_config.json"):
        train(tiny, target, resume_from_checkpoint=str(checkpoint))
    (target / "adapter_config.json").unlink()
    with pytest.raises(UserError, match="in another folder"):
        train(tiny, target, resume_from_checkpoint=str(checkpoint))
    fresh = tmp_path / "fresh"
    result = train(tiny, fresh, resume_from_checkpoint=str(checkpoint), max_steps=4)
    assert result.global_step == 4 and (target / "results.csv").read_text() == "a,b\n"


def test_a_second_run_into_the_same_folder_is_refused_and_a_stale_lock_taken_over(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import socket
        (out / LOCK).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "started": "then"}))
        with pytest.raises(UserError, match=rf"in use by process {holder.pid} on"):
            train(tiny, out)
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone: its lock is stale and is taken over, with a message.
    result = train(tiny, out)
    assert result.global_step == 4 and not (out / LOCK).exists()
    assert f"taking over the lock of process {holder.pid}" in capsys.readouterr().out


def test_a_checkpoint_half_written_when_the_run_was_killed_is_removed_and_the_run_resumes(tiny, tmp_path, capsys):
    """SIGKILL during a save leaves checkpoint-N.tmp, which the manifest never listed: it is the run's own
    leftover (not a user's file), so the resume removes it and continues from the last complete checkpoint.
    A checkpoint-N.tmp in a folder no steadytune run owns stays a user's file and is refused."""
    out = tmp_path / "run"
    train(tiny, out, max_steps=2)
    manifest = read_manifest(out)
    manifest["status"] = "running"          # what a killed run leaves
    (out / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    partial = out / "checkpoint-4.tmp"
    partial.mkdir()
    (partial / "adapter_model.safetensors").write_bytes(b"half")
    result = train(tiny, out, resume_from_checkpoint=True)
    assert result.global_step == 4 and not partial.exists(), sorted(p.name for p in out.iterdir())
    assert "removed checkpoint-4.tmp" in capsys.readouterr().out

    user_folder = tmp_path / "theirs"
    (user_folder / "checkpoint-2.tmp").mkdir(parents=True)
    with pytest.raises(UserError, match="checkpoint-2.tmp"):
        train(tiny, user_folder)
    assert (user_folder / "checkpoint-2.tmp").is_dir()


def test_a_failed_start_leaves_the_folder_as_it_found_it_and_the_fixed_rerun_works(tiny, tmp_path):
    absent = tmp_path / "new_run"
    with pytest.raises(ConfigError, match="not in .*dataset_info"):
        train(tiny, absent, dataset="no_such_dataset")
    assert not absent.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("x")
    with pytest.raises(UserError):
        train(tiny, existing, dataset="no_such_dataset", overwrite_output_dir=True)
    assert sorted(p.name for p in existing.iterdir()) == ["keep.txt"]
    assert train(tiny, absent).global_step == 4


def test_killed_before_the_first_checkpoint_then_resume_true_starts_fresh(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    # What a run killed during its first steps leaves: its config, a few metrics, a manifest saying "running" and
    # a lock whose process is gone.
    (out / "run_config.yaml").write_text("decisions: {}\n")
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n')
    (out / MANIFEST).write_text(json.dumps({"status": "running", "files": ["run_config.yaml", "metrics.jsonl"]}))
    (out / LOCK).write_text(json.dumps({"pid": 2 ** 22 + 1234, "host": __import__("socket").gethostname()}))
    result = train(tiny, out, resume_from_checkpoint=True)
    assert result.global_step == 4
    config = yaml.safe_load((out / "run_config.yaml").read_text())
    assert "no checkpoint" in config["decisions"]["start"]["reason"]


def _killed_during_its_first_checkpoint(out: Path, tmp_path: Path) -> None:
    """What SIGKILL during the first checkpoint's save leaves (issue 25 case 14): a manifest written at the start,
    listing neither metrics.jsonl (written after it) nor the half checkpoint; a lock naming a process that is gone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out.mkdir()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - 60))
    (out / "run_config.yaml").write_text("decisions: {}\n")
    (out / MANIFEST).write_text(json.dumps({"status": "running", "files": [MANIFEST, "run_config.yaml"],
                                            "started": started}))
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9}\n')
    (out / "checkpoint-2.tmp").mkdir()
    (out / "checkpoint-2.tmp" / "adapter_model.safetensors").write_bytes(b"half")
    (out / LOCK).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(), "started": started}))


@pytest.mark.parametrize("keys", [{}, {"resume_from_checkpoint": True}, {"overwrite_output_dir": True}])
def test_a_run_killed_while_writing_its_first_checkpoint_is_rerun_in_the_same_folder(tiny, tmp_path, keys, capsys):
    out = tmp_path / "run"
    _killed_during_its_first_checkpoint(out, tmp_path)
    result = train(tiny, out, **keys)
    assert result.global_step == 4 and not (out / "checkpoint-2.tmp").exists()
    assert "metrics.jsonl" in read_manifest(out)["files"]
    assert sum('"loss"' in line for line in (out / "metrics.jsonl").read_text().splitlines()) == 4


def test_a_users_file_older_than_the_killed_run_is_still_theirs(tiny, tmp_path):
    """Only what the killed run wrote (after its lock was taken) is counted as its own: a user's tokenizer.json
    from before it started is still refused, by name."""
    out = tmp_path / "run"
    _killed_during_its_first_checkpoint(out, tmp_path)
    (out / "tokenizer.json").write_text("{}")
    an_hour_ago = time.time() - 3600
    os.utime(out / "tokenizer.json", (an_hour_ago, an_hour_ago))
    with pytest.raises(UserError, match="holds tokenizer.json, which this run would write but no steadytune run"):
        train(tiny, out)
    assert (out / "tokenizer.json").read_text() == "{}"


def test_a_real_sigkill_before_the_first_checkpoint_then_the_same_command_runs(tiny, tmp_path):
    out = tmp_path / "run"
    config = slow_run_config(tiny, tmp_path, out)
    proc = subprocess.Popen([sys.executable, "-m", "steadytune", "train", str(config)], cwd=REPO, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for_steps(out, proc, 2)
    proc.kill()
    proc.communicate(timeout=60)
    assert read_manifest(out)["status"] == "running" and (out / LOCK).exists()
    done = cli("train", str(config), "max_steps=3")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert read_manifest(out)["status"] == "finished"


def test_an_unfinished_run_is_continued_from_its_last_checkpoint(tiny, tmp_path):
    out = tmp_path / "run"
    train(tiny, out, max_steps=4)
    # Make it look interrupted after checkpoint-2: the final outputs never got written.
    for name in ("adapter_model.safetensors", "adapter_config.json", "train_results.json"):
        (out / name).unlink()
    manifest = read_manifest(out)
    manifest["status"] = "interrupted"
    (out / MANIFEST).write_text(json.dumps(manifest))
    result = train(tiny, out, max_steps=4)
    assert result.global_step == 4 and len(result.losses) == 2           # steps 3 and 4 only
    config = yaml.safe_load((out / "run_config.yaml").read_text())
    assert "did not finish" in config["decisions"]["start"]["reason"]


def test_eval_refuses_to_overwrite_result_files_it_did_not_write(tiny, tmp_path):
    data = tmp_path / "reviews.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in classification_rows()), encoding="utf-8")
    out = tmp_path / "cls"
    config = write_yaml(tmp_path / "cls.yaml", {
        "model_name_or_path": str(tiny), "dataset": str(data), "label_names": ["消极", "积极"],
        "prompt_template": "评论：{text}\n情感：", "template": "empty", "output_dir": str(out), "max_steps": 2,
        "per_device_train_batch_size": 4, "val_size": 0.25, "lora_rank": 4})
    assert cli_main(["train", str(config)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "predictions.jsonl").write_text("my predictions\n")
    proc = cli("eval", str(config), "--known-samples", "0", "--output-dir", str(elsewhere))
    assert "predictions.jsonl, which steadytune did not write" in one_line_error(proc)
    assert (elsewhere / "predictions.jsonl").read_text() == "my predictions\n"
    assert cli("eval", str(config), "--known-samples", "0", "--output-dir", str(elsewhere),
               "--overwrite").returncode == 0
    # Its own earlier results (and the run folder's) are replaced without asking.
    assert cli("eval", str(config), "--known-samples", "0", "--output-dir", str(elsewhere)).returncode == 0
    assert cli("eval", str(config), "--known-samples", "0").returncode == 0


# --- 3. signals --------------------------------------------------------------------------------------------

def slow_run_config(tiny: Path, tmp_path: Path, out: Path, **extra) -> Path:
    return write_yaml(tmp_path / "slow.yaml", settings(tiny, out, max_steps=100000, save_steps=100000,
                                                       logging_steps=1, **extra))


def wait_for_steps(out: Path, proc: subprocess.Popen, steps: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and sum(1 for line in metrics.read_text().splitlines() if '"loss"' in line) >= steps:
            return
        time.sleep(0.1)
    raise AssertionError(f"run did not reach {steps} steps (rc {proc.poll()})")


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_a_checkpoint_at_the_step_boundary_and_the_run_continues_later(tiny, tmp_path, signum, code):
    out = tmp_path / "run"
    config = slow_run_config(tiny, tmp_path, out)
    proc = subprocess.Popen([sys.executable, "-m", "steadytune", "train", str(config)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for_steps(out, proc, 3)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-2000:]
    assert "Traceback" not in stderr and f"stopped by {signal.Signals(signum).name} at step" in stderr
    checkpoint = latest_checkpoint(out)
    assert checkpoint is not None and read_state(checkpoint).global_step >= 3
    assert read_manifest(out)["status"] == "interrupted" and not (out / LOCK).exists()
    # The same command again continues from that checkpoint (a shorter run here, so it finishes).
    done = cli("train", str(config), f"max_steps={read_state(checkpoint).global_step + 2}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resuming from {checkpoint.name}" in done.stdout


def test_a_second_signal_stops_at_once(tiny, tmp_path):
    out = tmp_path / "run"
    config = slow_run_config(tiny, tmp_path, out)
    proc = subprocess.Popen([sys.executable, "-m", "steadytune", "train", str(config)], cwd=REPO, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for_steps(out, proc, 2)
    # Two signals in the same instant: the second arrives before any step boundary.
    os.kill(proc.pid, signal.SIGINT)
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-2000:]


# --- 4. a resume is the same run ------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("learning_rate", 0.5), ("dataset", "alpaca_zh_sample"), ("seed", 11),
                                       ("lora_rank", 8), ("lora_target", "q_proj,v_proj"), ("cutoff_len", 64)])
def test_resume_with_changed_training_keys_is_refused_naming_old_and_new(tiny, tmp_path, key, value):
    out = tmp_path / "run"
    train(tiny, out, max_steps=2, save_steps=1)
    with pytest.raises(CheckpointError, match=rf"{key}: .* -> .*{str(value)[:4]}"):
        train(tiny, out, resume_from_checkpoint=True, max_steps=4, **{key: value})


def test_resume_with_the_same_dataset_name_but_changed_data_is_refused_naming_the_file(tiny, tmp_path):
    """Issue 25 case 11: every answer of the dataset file rewritten, the name kept: the resume is refused, naming
    the dataset and its file, as a changed key is; the same bytes with a new modification time resume."""
    data = tmp_path / "data"
    shutil.copytree(sample_dir(), data)
    out = tmp_path / "run"
    train(tiny, out, max_steps=3, save_steps=2, dataset_dir=str(data))
    file = data / "alpaca_sample.json"
    os.utime(file)  # touched, not changed
    assert train(tiny, out, resume_from_checkpoint=True, max_steps=4, dataset_dir=str(data)).global_step == 4
    rows = json.loads(file.read_text(encoding="utf-8"))
    for row in rows:
        row["output"] = "rewritten"
    file.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    proc = cli("train", str(write_yaml(tmp_path / "r.yaml", settings(tiny, out, resume_from_checkpoint=True,
                                                                      max_steps=5, dataset_dir=str(data)))))
    line = one_line_error(proc)
    assert f"dataset_file.{ALPACA}: " in line and str(file) in line and "sha256" in line, line


def test_resume_with_bookkeeping_keys_changed_applies_and_records_them(tiny, tmp_path):
    out = tmp_path / "run"
    train(tiny, out, max_steps=2, save_steps=1)
    result = train(tiny, out, resume_from_checkpoint=True, max_steps=5, logging_steps=2, save_steps=3)
    assert result.global_step == 5
    changes = yaml.safe_load((out / "run_config.yaml").read_text())["decisions"]["resume_changes"]["value"]
    assert any(c.startswith("max_steps: 2 -> 5") for c in changes) and any("logging_steps" in c for c in changes)


def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny, out, max_steps=3, save_steps=1, save_total_limit=5)
    latest = latest_checkpoint(out)
    optimizer = latest / "optimizer.pt"
    optimizer.write_bytes(b"\x00" * optimizer.stat().st_size)    # same size, garbage inside
    # Named explicitly, the damaged one is an error (nothing to fall back on that the user asked for).
    with pytest.raises(CheckpointError, match="optimizer.pt"):
        train(tiny, tmp_path / "other", resume_from_checkpoint=str(latest), max_steps=4)
    result = train(tiny, out, resume_from_checkpoint=True, max_steps=4)
    assert result.global_step == 4
    err = capsys.readouterr().err
    assert str(latest) in err and "optimizer.pt" in err and "falling back to checkpoint-" in err


def _flip_a_weight_bit(path: Path) -> None:
    """Change one bit of the first number stored in a torch file's largest tensor record: the file keeps its size
    and still loads; only a hash can tell."""
    with zipfile.ZipFile(path) as z:
        record = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[record.header_offset + 26:record.header_offset + 30])
    data[record.header_offset + 30 + name_len + extra_len] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_bit_flipped_checkpoint_file_is_skipped_by_its_sha256_and_the_previous_one_used(tiny, tmp_path, capsys):
    """Issue 25 case 12: optimizer.pt of the newest checkpoint changed by one bit (same size, still loads): its
    SHA-256 from trainer_state.json refuses it, and the resume falls back to the checkpoint before, saying so."""
    out = tmp_path / "run"
    train(tiny, out, max_steps=5, save_steps=2)
    newest = out / "checkpoint-4"
    optimizer = newest / "optimizer.pt"
    size, before = optimizer.stat().st_size, load_torch_state(optimizer)
    _flip_a_weight_bit(optimizer)
    after = load_torch_state(optimizer)
    changed = [k for i, slots in before["state"].items() for k, t in slots.items()
               if not torch.equal(t, after["state"][i][k])]
    assert optimizer.stat().st_size == size and len(changed) == 1, changed
    capsys.readouterr()
    assert train(tiny, out, resume_from_checkpoint=True, max_steps=6).global_step == 6
    err = capsys.readouterr().err
    assert re.search(r"checkpoint-4: damaged checkpoint \(optimizer\.pt does not match its SHA-256.*falling back to "
                     r"checkpoint-2", err), err
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"resume"' in line]
    assert resumed and resumed[-1]["checkpoint"].endswith("checkpoint-2")
    # every later re-run does the same (the corrupt checkpoint-4 was replaced by the resumed run's own)
    assert read_state(out / "checkpoint-4").sha256["optimizer.pt"]


def test_a_truncated_latest_checkpoint_falls_back_with_a_message(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny, out, max_steps=3, save_steps=1, save_total_limit=5)
    latest = latest_checkpoint(out)
    with (latest / "adapter_model.safetensors").open("r+b") as f:
        f.truncate(100)
    assert train(tiny, out, resume_from_checkpoint=True, max_steps=4).global_step == 4
    assert "trying the previous checkpoint" in capsys.readouterr().err


def test_a_checkpoint_or_its_file_linked_outside_the_run_folder_is_refused_on_resume(tiny, tmp_path):
    """Issue 25 case 13: a whole checkpoint-N, or one file in it, that is a symbolic link out of the run folder is
    not followed: one line naming the link (and no quiet fallback past it to an older checkpoint)."""
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    train(tiny, out, max_steps=5, save_steps=2)
    shutil.move(out / "checkpoint-4", elsewhere / "checkpoint-4")
    (out / "checkpoint-4").symlink_to(elsewhere / "checkpoint-4")
    config = write_yaml(tmp_path / "r.yaml", settings(tiny, out, resume_from_checkpoint=True, max_steps=6))
    line = one_line_error(cli("train", str(config)))
    assert f"{out / 'checkpoint-4'} is a symbolic link" in line and "outside" in line, line
    # the folder back in place, one of its files a link out
    (out / "checkpoint-4").unlink()
    shutil.move(elsewhere / "checkpoint-4", out / "checkpoint-4")
    shutil.move(out / "checkpoint-4" / "optimizer.pt", elsewhere / "optimizer.pt")
    (out / "checkpoint-4" / "optimizer.pt").symlink_to(elsewhere / "optimizer.pt")
    line = one_line_error(cli("train", str(config)))
    assert f"{out / 'checkpoint-4' / 'optimizer.pt'} is a symbolic link" in line, line
    assert (elsewhere / "optimizer.pt").is_file()


def test_rotation_over_a_symlinked_checkpoint_removes_the_link_only(tiny, tmp_path, capsys):
    """save_total_limit reaching a checkpoint-N that is a link (a user moved it to another disk) removes the link
    from the run folder, says so, and never deletes what it points to; the run goes on."""
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    train(tiny, out, max_steps=3, save_steps=1)  # checkpoint-1 and -2
    shutil.move(out / "checkpoint-1", elsewhere / "checkpoint-1")
    (out / "checkpoint-1").symlink_to(elsewhere / "checkpoint-1")
    kept = sorted(p.name for p in (elsewhere / "checkpoint-1").iterdir())
    capsys.readouterr()
    result = train(tiny, out, resume_from_checkpoint=True, max_steps=5, save_steps=1, save_total_limit=2)
    assert result.global_step == 5
    err = capsys.readouterr().err
    assert "checkpoint-1 is a symbolic link" in err and "removed the link only" in err, err
    assert not (out / "checkpoint-1").exists() and not (out / "checkpoint-1").is_symlink()
    assert sorted(p.name for p in (elsewhere / "checkpoint-1").iterdir()) == kept
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-3", "checkpoint-4"]


def rerecord(checkpoint: Path, name: str) -> None:
    """Record `name`'s present size and SHA-256 in the checkpoint's trainer_state.json, as its writer would have."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    state["sizes"][name] = (checkpoint / name).stat().st_size
    state["sha256"][name] = sha256_file(checkpoint / name)
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))


def test_a_resumed_adapter_holding_nan_is_refused(tiny, tmp_path):
    from safetensors.torch import load_file, save_file
    out = tmp_path / "run"
    train(tiny, out, max_steps=2, save_steps=1)
    latest = latest_checkpoint(out)
    weights = load_file(latest / "adapter_model.safetensors")
    name = next(iter(weights))
    weights[name][0] = float("nan")
    save_file(weights, latest / "adapter_model.safetensors", metadata={"format": "pt"})
    rerecord(latest, "adapter_model.safetensors")   # written by a run that diverged: its record agrees
    with pytest.raises(CheckpointError, match="hold NaN or inf"):
        train(tiny, out, resume_from_checkpoint=str(latest), max_steps=3)


def test_a_pickled_payload_in_a_checkpoint_never_runs(tiny, tmp_path):
    """A shared checkpoint whose optimizer.pt carries code: refused by name, and the code does not run."""
    out = tmp_path / "run"
    train(tiny, out, max_steps=2, save_steps=1)
    latest = latest_checkpoint(out)
    marker = tmp_path / "payload_ran"
    payload = latest / "optimizer.pt"
    subprocess.run([sys.executable, "-c", (
        "import os, sys, torch\n"
        "class Payload:\n"
        "    def __reduce__(self):\n"
        f"        return (os.system, ('touch {marker}',))\n"
        f"torch.save({{'state': {{}}, 'param_groups': [], 'x': Payload()}}, {str(payload)!r})\n")], check=True)
    rerecord(latest, "optimizer.pt")   # a careful attacker fixes the recorded size and hash too
    proc = cli("train", str(write_yaml(tmp_path / "r.yaml", settings(tiny, out, resume_from_checkpoint=str(latest),
                                                                      max_steps=3))))
    assert "refused to load" in one_line_error(proc) and "optimizer.pt" in proc.stderr
    assert not marker.exists()


# --- 5. the environment's faults: one line, non-zero exit -----------------------------------------------------

def test_output_dir_that_is_a_file(tiny, tmp_path):
    (tmp_path / "out").write_text("a file")
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(tiny, tmp_path / "out"))))
    assert "is a file, not a folder" in one_line_error(proc)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder; run the suite as a user")
def test_read_only_output_folder(tiny, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(tiny, parent / "run"))))
        assert "permission denied" in one_line_error(proc)
    finally:
        parent.chmod(0o755)


# A full disk. Where /dev/full is a device (most Linux machines) Python's and torch's writes really go there and fail
# as on a full disk; where it is missing (some containers) a file whose writes fail the same way stands in. safetensors
# never writes there: from 0.8.0 it writes a temporary file and renames it over the target, which (as root) replaced
# the device itself with a regular file. It raises instead the error it raised on a full 64 KiB tmpfs (`mount -t tmpfs
# -o size=64k`), copied here word for word.
FULL = Path("/dev/full")
SAFETENSORS_ON_A_FULL_DISK = "Error while serializing: I/O error: No space left on device (os error 28)"


class _FullDiskFile(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def open_on_a_full_disk(mode: str = "wb"):
    return open(FULL, mode) if FULL.is_char_device() else _FullDiskFile()


@pytest.fixture()
def fill_disk(monkeypatch):
    """fill_disk(part): every write of a path holding `part` (a checkpoint's python files, torch files and the
    safetensors file peft writes) fails as on a full disk."""
    def fill(part: str) -> None:
        real_open, real_save = open, peft.peft_model.safe_save_file

        def full_open(path, mode="r", *args, **kwargs):
            if part in str(path) and "w" in mode:
                return open_on_a_full_disk(mode)
            return real_open(path, mode, *args, **kwargs)

        def full_save(tensors, filename, metadata=None):
            if part not in str(filename):
                return real_save(tensors, filename, metadata=metadata)
            raise safetensors.SafetensorError(SAFETENSORS_ON_A_FULL_DISK)

        monkeypatch.setattr(ckpt, "open", full_open, raising=False)
        monkeypatch.setattr(peft.peft_model, "safe_save_file", full_save)
    yield fill
    assert FULL.is_char_device() or not FULL.exists(), "a test wrote a file at /dev/full"


@pytest.mark.parametrize("failing", ["adapter_model.safetensors", "optimizer.pt", "trainer_state.json"])
def test_disk_full_while_saving_a_checkpoint_keeps_the_last_complete_one(tiny, tmp_path, fill_disk, failing):
    """The save of checkpoint-4 hits a full disk while writing the weights (safetensors), the optimizer state (torch)
    or the small state file: one line naming the folder, the file, the free space and what the checkpoint needs,
    no traceback, and checkpoint-2 stays whole."""
    fill_disk(f"checkpoint-4.tmp/{failing}")
    out = tmp_path / "run"
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(tiny, out, max_steps=6, save_steps=2))))
    line = one_line_error(proc)
    assert re.search(rf"disk full while saving checkpoint-4 in {re.escape(str(out))} \(writing {failing}\): "
                     r"[\d.]+ [KMG]?i?B free there, the checkpoint needs about [\d.]+ [KMG]?i?B", line), line
    assert line.endswith("the last complete checkpoint, checkpoint-2, is kept"), line
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"] and read_state(out / "checkpoint-2")
    assert not (out / "checkpoint-4.tmp").exists() and read_manifest(out)["status"] == "failed"


def test_disk_full_during_the_final_save_leaves_no_half_adapter(tiny, tmp_path, fill_disk):
    fill_disk(".final.tmp/adapter_model.safetensors")
    out = tmp_path / "run"
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(tiny, out, max_steps=3, save_steps=2))))
    line = one_line_error(proc)
    assert re.search(r"disk full .*final adapter.*free there.*checkpoint-2 is complete", line), line
    assert not (out / "adapter_model.safetensors").exists() and not (out / ".final.tmp").exists()


def test_a_truncated_base_model_is_one_line(tiny, tmp_path):
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    weights = broken / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(broken, tmp_path / "out"))))
    line = one_line_error(proc)
    assert str(broken) in line and not (tmp_path / "out").exists()


@pytest.mark.parametrize("override,message", [
    ("learning_rate=.nan", "learning_rate: nan is not a finite number"),
    ("seed=-1", "seed: -1 is out of range"),
    ("flash_attn=fa2", "flash_attn: fa2 was asked for"),
    ("fault_injection.nan_loss_step=-2", "fault_injection.nan_loss_step: -2 is out of range"),
    ("fault_injection.nan_loss_step=99", "fault_injection.nan_loss_step: step 99 is beyond the run's 4 steps"),
    ("eval_strategy=steps", "eval_strategy: steps, but there is no eval data"),
    ("metric_for_best_model=eval_loss", "metric_for_best_model: eval_loss, but there is no eval data"),
])
def test_bad_values_are_one_line(tiny, tmp_path, override, message):
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(tiny, tmp_path / "out"))), override)
    assert message in one_line_error(proc)
    assert not (tmp_path / "out").exists()


def test_resume_with_another_lora_rank_is_one_line(tiny, tmp_path):
    out = tmp_path / "run"
    train(tiny, out, max_steps=2, save_steps=1)
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(tiny, out, resume_from_checkpoint=True,
                                                                      max_steps=3, lora_rank=16))))
    assert "lora_rank: 4 -> 16" in one_line_error(proc)


# --- 6. what was silently wrong ------------------------------------------------------------------------------

def test_duplicate_yaml_keys_name_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("learning_rate: 1.0e-4\nseed: 1\nlearning_rate: 1.0e-3\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'learning_rate' at line 3 \(first at line 1\)"):
        load_config(path)


def test_truncation_is_counted_printed_and_warned(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny, out, cutoff_len=40, max_steps=1)
    captured = capsys.readouterr()
    assert "cutoff_len 40 truncated" in captured.out and "more than 10% of the examples lost prompt" in captured.err
    decision = yaml.safe_load((out / "run_config.yaml").read_text())["decisions"]["truncation"]
    assert decision["value"]["truncated"] > 0 and decision["value"]["examples_losing_prompt"] > 0
    train(tiny, tmp_path / "roomy", cutoff_len=512, max_steps=1)
    assert "truncated" not in capsys.readouterr().out


def test_accumulation_beyond_an_epoch_is_said(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny, out, max_samples=8, per_device_train_batch_size=4, gradient_accumulation_steps=4, max_steps=1,
          packing=False)
    assert "gradient_accumulation_steps 4 is more than the 2 micro-batches of an epoch" in capsys.readouterr().err


def test_a_run_ending_in_nan_exits_non_zero_even_with_the_guard_off(tiny, tmp_path):
    config = write_yaml(tmp_path / "c.yaml", settings(tiny, tmp_path / "run", guard_policy="off",
                                                      fault_injection={"nan_loss_step": 2}))
    proc = cli("train", str(config))
    assert "non-finite" in one_line_error(proc, code=4)
    assert not (tmp_path / "run" / "adapter_model.safetensors").exists()
    assert json.loads((tmp_path / "run" / "train_results.json").read_text())["status"] == "diverged"


def test_eval_with_an_adapter_of_another_base_warns_naming_both(tiny, tmp_path):
    data = tmp_path / "reviews.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in classification_rows()), encoding="utf-8")
    other = save_tiny_model(tmp_path / "other_base", "qwen2", seed=5)
    keys = {"model_name_or_path": str(tiny), "dataset": str(data), "label_names": ["消极", "积极"],
            "prompt_template": "评论：{text}\n情感：", "template": "empty", "output_dir": str(tmp_path / "cls"),
            "max_steps": 1, "per_device_train_batch_size": 4, "val_size": 0.25, "lora_rank": 4}
    config = write_yaml(tmp_path / "cls.yaml", keys)
    assert cli_main(["train", str(config)]) == 0
    proc = cli("eval", str(config), f"model_name_or_path={other}", "--known-samples", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "was trained on base model" in proc.stderr and str(tiny) in proc.stderr and str(other) in proc.stderr


# --- 7. fail fast ---------------------------------------------------------------------------------------------

def test_data_errors_come_before_the_weights_load(tiny, tmp_path):
    """A broken weight file and a broken dataset: the dataset's error is the one reported, so it came first."""
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "q", "output": "a"}\n{"instruction": \n')
    proc = cli("train", str(write_yaml(tmp_path / "c.yaml", settings(broken, tmp_path / "out",
                                                                      dataset=str(bad)))))
    assert "bad.jsonl line 2" in one_line_error(proc)


def test_weights_whose_shapes_disagree_with_config_are_one_clear_error(tmp_path):
    """A damaged or mismatched model.safetensors (a tensor of another shape than config.json says): one line
    naming the folder, not transformers' traceback."""
    from safetensors.torch import load_file, save_file

    from steadytune.model.load import load_model_and_tokenizer
    folder = save_tiny_model(tmp_path / "m", "qwen2")
    weights = load_file(folder / "model.safetensors")
    weights["model.norm.weight"] = torch.zeros(0)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="its weights do not have the shapes its config.json gives"):
        load_model_and_tokenizer(load_config(None, {"model_name_or_path": str(folder)}).model)


@pytest.mark.parametrize("where", ["adapter_config.json", "base_model.json", "manifest", "lock"])
def test_json_nested_past_the_interpreter_limit_in_a_run_folder_is_no_traceback(tmp_path, where, capsys):
    """Issue 25: the readers of a run folder's own JSON files (json.loads raises RecursionError, not ValueError, on
    100,000 levels) refuse or ignore it in one line."""
    from steadytune.cli import main
    from steadytune.training.run_folder import LOCK, MANIFEST, read_manifest
    deep = "[" * 100_000 + "]" * 100_000
    run = tmp_path / "run"
    run.mkdir()
    (run / "adapter_config.json").write_text('{"base_model_name_or_path": "x"}', encoding="utf-8")
    (run / "adapter_model.safetensors").write_bytes(b"")
    name = {"manifest": MANIFEST, "lock": LOCK}.get(where, where)
    (run / name).write_text(deep, encoding="utf-8")
    if where == "manifest":
        assert read_manifest(run) == {}
        return
    code = main(["chat", str(run)])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and "RecursionError" not in err
    assert err.strip().count("\n") == 0, err
