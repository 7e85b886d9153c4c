"""The peer arms of `steadytune bench` (llamafactory, unsloth): a peer that cannot run here is skipped with its reason
and the fix, and the bench goes on; the examples reach LLaMA-Factory as the same token ids; LF's own run_exp trains
them end to end on CPU under LF's Python (skipped where that Python is absent: a fresh clone and CI)."""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from steadytune.bench import command, peers, workload
from steadytune.cli import main

TINY = ["bench", "--shape", "tiny", "--device", "cpu", "--examples", "120", "--max-tokens", "512", "--warmup", "1",
        "--window", "2"]
LF_PYTHON = os.environ.get("STEADYTUNE_LF_PYTHON") or "/tmp/lfvenv/bin/python"
needs_lf_python = pytest.mark.skipif(not Path(LF_PYTHON).is_file(),
                                     reason=f"needs a LLaMA-Factory 0.9.5 Python at {LF_PYTHON} (or named by "
                                            "STEADYTUNE_LF_PYTHON); a fresh clone and CI have none")


@pytest.fixture
def no_peer_env(monkeypatch):
    monkeypatch.delenv("STEADYTUNE_LF_PYTHON", raising=False)
    monkeypatch.delenv("STEADYTUNE_UNSLOTH_PYTHON", raising=False)


def bench_args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--shape", "tiny", "--device", "cpu", "--examples", "120"])
    return argparse.Namespace(**{**vars(args), **overrides})


# --- skipped, not failed ------------------------------------------------------------------------------------------

def test_peers_that_cannot_run_here_are_skipped_and_the_bench_goes_on(tmp_path, capsys, no_peer_env):
    out = tmp_path / "bench.json"
    code = main(TINY + ["--isolate", "none", "--arms", "llamafactory,unsloth,steadytune", "--steps", "1",
                        "--output", str(out)])
    assert code == 0  # skipped arms are not failures
    report = json.loads(out.read_text())
    lf, unsloth = report["arms"]["llamafactory"], report["arms"]["unsloth"]
    assert "--lf-python" in lf["skipped"] and "pip install 'llamafactory==0.9.5'" in lf["skipped"]
    assert "CUDA GPU" in unsloth["skipped"] and "pip install unsloth" in unsloth["skipped"]
    assert report["arms"]["steadytune"]["tokens_per_s"] > 0
    assert report["ratios"] == {}  # nothing to compare against
    printed = capsys.readouterr().out
    assert f"llamafactory: skipped: {lf['skipped']}" in printed and "unsloth: skipped: Unsloth needs" in printed


def test_an_lf_python_that_is_missing_or_lacks_llamafactory_is_a_reason_with_the_fix(tmp_path):
    version, why = peers.llamafactory_check(str(tmp_path / "nowhere" / "python"))
    assert version is None and "no such file" in why and "pip install 'llamafactory==0.9.5'" in why
    version, why = peers.llamafactory_check(sys.executable)  # steadytune's own Python has no llamafactory
    assert version is None and "cannot import llamafactory" in why and "No module named 'llamafactory'" in why
    assert f"{sys.executable} -m pip install 'llamafactory==0.9.5'" in why


def test_unsloth_without_its_package_is_a_reason_with_the_pip_command():
    # the device check passes on the word "cuda"; the import check then runs in this Python, which has no unsloth
    version, why = peers.unsloth_check(sys.executable, torch.device("cuda"))
    assert version is None and "cannot import unsloth" in why and f"{sys.executable} -m pip install unsloth" in why


# --- the new flags ------------------------------------------------------------------------------------------------

def test_peer_pythons_come_from_the_flags_then_the_environment(monkeypatch, no_peer_env):
    args = bench_args()
    assert args.lf_python is None and args.unsloth_python is None
    assert peers.llamafactory_python(args) is None and peers.unsloth_python(args) == sys.executable
    monkeypatch.setenv("STEADYTUNE_LF_PYTHON", "/env/lf/python")
    monkeypatch.setenv("STEADYTUNE_UNSLOTH_PYTHON", "/env/unsloth/python")
    assert peers.llamafactory_python(args) == "/env/lf/python"
    assert peers.unsloth_python(args) == "/env/unsloth/python"
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    flagged = parser.parse_args(["--lf-python", "/flag/lf", "--unsloth-python", "/flag/unsloth",
                                 "--arms", "plain,peer,llamafactory,unsloth,steadytune"])
    assert peers.llamafactory_python(flagged) == "/flag/lf" and peers.unsloth_python(flagged) == "/flag/unsloth"
    assert flagged.arms.split(",") == list(command.SPEED_ARMS)


# --- the same examples, and the table -----------------------------------------------------------------------------

def test_the_lf_dataset_tokenizes_back_to_the_same_ids_and_labels(tmp_path):
    examples = peers.one_pass(bench_args())[:20]
    name = peers.write_lf_dataset(examples, tmp_path)
    assert json.loads((tmp_path / "dataset_info.json").read_text())[name]["file_name"] == f"{name}.json"
    records = json.loads((tmp_path / f"{name}.json").read_text())
    tokenizer = workload.word_tokenizer(workload.SHAPES["tiny"]["vocab_size"])
    for record, example in zip(records, examples):
        prompt = tokenizer(record["instruction"], add_special_tokens=False)["input_ids"]
        answer = tokenizer(record["output"], add_special_tokens=False)["input_ids"]
        assert prompt + answer == example["input_ids"]
        assert [-100] * len(prompt) + answer == example["labels"]  # LF masks the prompt, as bench does


def test_lf_rows_hold_the_longest_example_and_are_a_multiple_of_8():
    examples = [{"input_ids": [5] * 741}, {"input_ids": [5] * 10}]
    assert peers.lf_row_tokens(512, examples) == 744
    assert peers.lf_row_tokens(16384, examples) == 16384


def test_a_peer_that_runs_out_of_memory_is_tried_again_with_the_next_setting(monkeypatch, tmp_path):
    seen = []

    def fake_child(python, script, spec, log, timeout):
        seen.append(spec["attempt"]["batch"])
        if spec["attempt"]["batch"] == 32:
            return {"error": "OutOfMemoryError: CUDA out of memory", "out_of_memory": True}
        return {"summary": {"tokens_per_s": 1000.0, "timed_steps": 4}, "counts": {"mfu_parameters": 100, "mfu_lora_parameters": 10},
                "peak_memory_gib": None, "launched_at": 0.0, "first_step_at": 2.5, "timing_started_at": 3.0,
                "loss": 7.5, "loss_step": 5, "step_seconds": [], "step_tokens": [], "settings": {"batch": 16}}

    monkeypatch.setattr(peers, "run_child", fake_child)
    attempts = [{"label": f"batch {b}", "batch": b} for b in (32, 16, 8)]
    result = peers.run_attempts("unsloth", "py", "unsloth_child.py", {}, attempts,
                                bench_args(output=str(tmp_path / "b.json")), torch.device("cpu"), "2026.1")
    assert seen == [32, 16] and result["settings"]["fallback"] == ["batch 32: out of memory"]
    assert result["startup_seconds"] == 2.5 and result["startup_to_timing_seconds"] == 3.0
    assert result["peer_version"] == "unsloth 2026.1" and result["loss"] == 7.5


def test_the_peers_of_one_call_share_one_model_folder_written_once(tmp_path):
    args = bench_args(model_folders=str(tmp_path / "models"))
    first = peers.model_folder_for(args, torch.device("cpu"), tmp_path / "lf")
    weights = next(first.glob("*.safetensors"))
    written = weights.stat().st_mtime_ns
    assert peers.model_folder_for(args, torch.device("cpu"), tmp_path / "unsloth") == first
    assert weights.stat().st_mtime_ns == written  # reused, not written again
    (first / ".steadytune-complete").unlink()  # as if the first writer had been cut short
    assert peers.model_folder_for(args, torch.device("cpu"), tmp_path / "unsloth") == first
    assert (first / ".steadytune-complete").is_file() and (first / "config.json").is_file()
    alone = peers.model_folder_for(bench_args(), torch.device("cpu"), tmp_path / "work")  # no shared folder
    assert alone == tmp_path / "work" / "model" and (alone / "config.json").is_file()


def test_unsloth_steps_hold_the_token_budget_of_the_other_arms_and_shrink_when_out_of_memory():
    attempts = peers.unsloth_attempts(16384, 2048)
    assert [a["batch"] for a in attempts] == [8, 4, 2, 1] and attempts[0]["step_tokens"] == 16384
    assert [a["batch"] for a in peers.unsloth_attempts(1024, 2048)] == [1]  # a row longer than the budget: one row
    assert [a["batch"] for a in peers.unsloth_attempts(12000, 2048)] == [5, 2, 1]


def test_ratios_and_the_table_include_the_peers():
    ours = {"name": "steadytune", "tokens_per_s": 3000.0, "peak_memory_gib": 2.0}
    lf = {"name": "llamafactory", "tokens_per_s": 1000.0, "peak_memory_gib": 4.0, "mfu": 0.1, "relative_std": 0.01,
          "stopped": "steady", "steps": 100, "span_windows": 6, "startup_seconds": 20.0, "settings": {"batch": 1},
          "loss": 7.25, "loss_step": 105, "peer_version": "llamafactory 0.9.5"}
    skipped = {"name": "unsloth", "skipped": "Unsloth needs a CUDA GPU"}
    r = command.ratios({"steadytune": ours, "llamafactory": lf, "unsloth": skipped})
    assert r == {"vs_llamafactory": {"tokens_per_s": 3.0, "peak_memory": 0.5}}
    assert command.format_arm(skipped) == "     unsloth: skipped: Unsloth needs a CUDA GPU"
    line = command.format_arm(lf)
    assert "1,000 real tokens/s" in line and "loss 7.250 at step 105" in line and "llamafactory 0.9.5" in line


# --- LLaMA-Factory for real ---------------------------------------------------------------------------------------

@needs_lf_python
def test_llamafactory_trains_bench_examples_end_to_end_on_cpu(tmp_path, capsys, no_peer_env):
    out = tmp_path / "bench.json"
    code = main(TINY + ["--isolate", "none", "--arms", "llamafactory", "--steps", "2", "--lf-python", LF_PYTHON,
                        "--output", str(out)])
    lf = json.loads(out.read_text())["arms"]["llamafactory"]
    assert code == 0, lf.get("error")
    assert lf["steps"] == 2 and lf["tokens_per_s"] > 0 and lf["stopped"] == "fixed steps"
    assert math.isfinite(lf["loss"]) and lf["loss_step"] == 3  # 1 warm-up + 2 timed steps
    assert lf["peer_version"] == "llamafactory 0.9.5" and lf["startup_seconds"] > 0
    assert lf["parameters"] > 0 and lf["lora_parameters"] > 0
    row = lf["settings"]["row_tokens"]
    assert all(0 < t <= row for t in lf["step_tokens"]) and len(lf["step_tokens"]) == 2
    lf_args = lf["settings"]["lf_arguments"]
    assert lf_args["neat_packing"] and lf_args["lora_rank"] == workload.LORA_RANK and lf_args["lora_target"] == "all"
    assert "llamafactory" in capsys.readouterr().out
    assert_first_row_is_made_of_bench_examples(tmp_path / "bench.llamafactory.log")


def assert_first_row_is_made_of_bench_examples(log: Path):
    """LF prints its first training row (input_ids, label_ids): it must be whole bench examples, ids and labels."""
    lines = log.read_text(encoding="utf-8").splitlines()
    ids = ast.literal_eval(lines[lines.index("input_ids:") + 1])
    labels = ast.literal_eval(lines[lines.index("label_ids:") + 1])
    by_ids = {tuple(e["input_ids"]): e for e in peers.one_pass(bench_args())}
    sizes = sorted({len(k) for k in by_ids})
    position = matched = 0
    while position < len(ids) and ids[position] != workload.PAD_ID:
        size = next((n for n in sizes if tuple(ids[position:position + n]) in by_ids), None)
        assert size is not None, f"row position {position} does not start a bench example"
        assert labels[position:position + size] == by_ids[tuple(ids[position:position + size])]["labels"]
        position, matched = position + size, matched + 1
    assert matched >= 1


def test_an_arm_whose_loss_is_not_the_others_training_is_named():
    def arms(**losses):
        return {name: {"name": name, "loss": loss} for name, loss in losses.items()}
    # The Gemma 3 1B shape on the H200 (2026-12-02): the liger peer logged a loss of 0.0 beside 12.6-12.7 (every
    # step NaN, which the Trainer's default logging filter turned into 0.0; its arms now log NaN as NaN).
    gemma = arms(plain=12.698, peer=0.0, llamafactory=12.627, steadytune=12.585)
    assert command.disagreeing_losses(gemma) == {"peer": "is 0.0"}
    assert command.disagreeing_losses(arms(plain=12.67, peer=12.68, llamafactory=12.65, unsloth=12.65,
                                           steadytune=12.48)) == {}
    far = command.disagreeing_losses(arms(plain=12.7, peer=12.6, unsloth=6.1, steadytune=12.5))
    assert list(far) == ["unsloth"] and "from the arms' median" in far["unsloth"]
    assert "nan" in command.disagreeing_losses(arms(plain=float("nan"), steadytune=12.5))["plain"]
    # Two sound losses are not judged against each other: which of them would be wrong?
    assert command.disagreeing_losses(arms(plain=12.7, steadytune=6.0)) == {}
    assert command.disagreeing_losses({"unsloth": {"name": "unsloth", "error": "did not finish"}}) == {}


def test_an_arm_past_its_time_is_stopped_with_its_whole_process_group_and_its_log_says_how_far_it_got(
        tmp_path, monkeypatch):
    args = bench_args(output=str(tmp_path / "bench.json"), arm_timeout=0.5, isolate="process", model_folders=None)
    peers.log_path_for(args, "llamafactory").write_text("loading\nTokenizing the dataset\n", encoding="utf-8")
    started = []

    class Recorded(command.subprocess.Popen):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self)

    monkeypatch.setattr(command.subprocess, "Popen", Recorded)
    result = command.run_arm("llamafactory", args, torch.device("cpu"))   # its Python is still importing at 0.5 s
    assert result["error"].startswith("did not finish in --arm-timeout 0.5 s")
    assert result["error"].endswith("the last line of its log (bench.llamafactory.log): Tokenizing the dataset")
    (arm,) = started
    assert arm.returncode is not None
    with pytest.raises(ProcessLookupError):   # its session (the arm and any child of it) is gone
        os.killpg(arm.pid, 0)
