"""The numerical guard: detection, policies, snapshots and rollback on their own, then skip / abort / a SIGKILLed
run's resume through the real training entry point (tiny model, CPU)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from sample_data import ALPACA, sample_dir

from steadytune import cli
from steadytune.config import load_config
from steadytune.hardware.rocm_profile import apply_hardware_profile
from steadytune.model.tiny import save_tiny_model
from steadytune.training.checkpoint import latest_checkpoint, read_state
from steadytune.training.guard import (
    ABORT,
    EXIT_GUARD_ABORT,
    OK,
    ROLLBACK,
    SKIP,
    WARN,
    GuardAbort,
    LiveObjects,
    NumericalGuard,
)


def make_guard(policy="rollback", precision="fp32", **guard_keys) -> tuple[NumericalGuard, list]:
    cfg = load_config(None, {"guard_policy": policy, "guard": {"min_history": 5, "snapshot_steps": 5, **guard_keys}})
    events: list = []
    return NumericalGuard(cfg.guard, precision, emit=events.append, max_grad_norm=1.0), events


def feed(guard: NumericalGuard, steps, loss=1.0, grad=1.0):
    for step in steps:
        # a little deterministic noise, as real losses have
        assert guard.inspect(step, loss + 0.02 * (step % 3), grad + 0.05 * (step % 2)).action == OK


# --- detection ---------------------------------------------------------------------------------------------

def test_nonfinite_values_are_caught_before_the_update():
    guard, events = make_guard("skip")
    d = guard.inspect(1, float("nan"), 1.0, batch_ids=[3, 7])
    assert (d.action, d.kind, d.apply_update) == (SKIP, "nonfinite_loss", False)
    assert guard.inspect(2, 1.0, float("inf")).kind == "nonfinite_grad_norm"
    assert events[0]["batch_ids"] == [3, 7] and events[0]["loss"] == "nan"  # JSON-safe


def test_spike_needs_both_sigmas_and_ratio_and_enough_history():
    early, _ = make_guard("skip")
    assert early.inspect(1, 50.0, 1.0).action == OK          # no history yet: only non-finite is judged
    guard, _ = make_guard("skip")
    feed(guard, range(2, 12))
    assert guard.inspect(12, 1.3, 1.0).action == OK           # 1.3x the median: a normal bad batch
    spike = guard.inspect(13, 3.5, 1.0)                       # seed 000: 1.2 -> 3.5
    assert (spike.action, spike.kind) == (SKIP, "loss_spike")
    assert spike.values["loss_median"] == pytest.approx(1.02, abs=0.02)
    assert guard.inspect(14, 1.0, 40.0).kind == "grad_norm_spike"


def test_preference_stages_judge_no_loss_spikes_unless_asked():
    """A DPO step's loss over a few pairs is heavy-tailed (on the H200, 1.91 after a median of 0.72, an ordinary
    batch TRL trained on): the preference stages judge only non-finite values and gradient-norm spikes."""
    from steadytune.stages.guard_rules import judge_loss_spikes

    dpo = load_config(None, {"stage": "dpo"})
    assert judge_loss_spikes(dpo) is False and dpo.decisions["loss_spikes"]["value"] is False
    assert judge_loss_spikes(load_config(None, {"stage": "sft"})) is True
    assert judge_loss_spikes(load_config(None, {"stage": "kto", "guard": {"loss_spikes": True}})) is True
    quiet = load_config(None, {"stage": "rm", "guard_policy": "off"})
    assert judge_loss_spikes(quiet) is False and "loss_spikes" not in quiet.decisions   # nothing to say: guard off

    cfg = load_config(None, {"guard_policy": "skip", "guard": {"min_history": 5}})
    guard = NumericalGuard(cfg.guard, "fp32", judge_loss_spikes=False)
    feed(guard, range(1, 12))
    assert guard.inspect(12, 3.5, 1.0).action == OK              # a spike for sft, an ordinary DPO step
    assert guard.inspect(13, float("nan"), 1.0).kind == "nonfinite_loss"
    assert guard.inspect(14, 1.0, 40.0).kind == "grad_norm_spike"


def test_grad_norm_needs_a_bigger_jump_than_the_loss():
    """Gradient norms of small batches swing 3-6x in healthy runs (3.5x on a tiny model, 5.9x on the CPU demo):
    such a swing is not a spike, however steady the history was; grad_spike_ratio x the median is."""
    def after_flat_history(grad_norm: float) -> str:
        guard, _ = make_guard("skip")
        for step in range(1, 12):
            guard.inspect(step, 1.0, 0.067)    # flat history: std ~0, so sigmas alone would flag anything
        return guard.inspect(12, 1.0, grad_norm).kind

    assert after_flat_history(0.24) == ""    # 3.6x the median
    assert after_flat_history(0.40) == ""    # 6x
    assert after_flat_history(0.60) == "grad_norm_spike"  # 9x > grad_spike_ratio 8
    assert make_guard("skip", grad_spike_ratio=2.5)[0].args.grad_spike_ratio == 2.5  # settable as guard.grad_spike_ratio


def test_off_checks_nothing_and_warn_only_reports():
    off, off_events = make_guard("off")
    assert off.inspect(1, float("nan"), float("nan")).action == OK and off_events == []
    warn, warn_events = make_guard("warn")
    d = warn.inspect(1, float("nan"), 1.0)
    assert d.action == WARN and d.apply_update and len(warn_events) == 1


def test_rollback_policy_drops_an_isolated_batch_and_rolls_back_on_a_repeat():
    guard, _ = make_guard("rollback", grad_norm_schedule=[1.0, 0.5, 0.3])
    model, state = tiny_state()
    guard.maybe_snapshot(0, state)
    feed(guard, range(1, 9))
    guard.maybe_snapshot(5, state)
    first = guard.inspect(9, float("nan"), 1.0, batch_ids=[1])
    assert first.action == SKIP and "isolated" in first.reason
    second = guard.inspect(9, 9.0, 1.0, batch_ids=[2])
    assert second.action == ROLLBACK
    assert second.values["restore_step"] == 5 and second.values["lr_scale"] == 0.5
    assert guard.max_grad_norm == 0.5                        # seed 000: 1.0 -> 0.5 -> 0.3
    assert guard.restore(state) == 5
    assert guard.should_skip([2]) and not guard.should_skip([2])  # the offending batch is skipped once


def test_gives_up_after_max_rollbacks_with_exit_code_3():
    guard, _ = make_guard("rollback", max_rollbacks=1)
    model, state = tiny_state()
    guard.maybe_snapshot(0, state)
    feed(guard, range(1, 6))
    guard.inspect(6, float("nan"), 1.0)
    assert guard.inspect(7, float("nan"), 1.0).action == ROLLBACK
    guard.restore(state)
    guard.inspect(6, float("nan"), 1.0)
    final = guard.inspect(7, float("inf"), 1.0)
    assert final.action == ABORT and "gave up after 1 rollbacks" in final.reason
    err = guard.abort_error(final, "out/checkpoint-0")
    assert isinstance(err, GuardAbort) and err.exit_code == EXIT_GUARD_ABORT == 3
    assert "step 7" in str(err) and "loss=inf" in str(err) and "checkpoint-0" in str(err) and "Likely cause" in str(err)


def test_clip_schedule_tightens_and_stops_at_its_last_value():
    guard, _ = make_guard()
    assert [guard._tighter_clip(c) for c in (1.0, 0.5, 0.3, 0.0, 2.0)] == [0.5, 0.3, 0.3, 1.0, 1.0]


def test_repeated_fp16_overflows_switch_precision_from_a_good_state():
    guard, events = make_guard("rollback", precision="fp16", max_fp16_overflows=3, window=10)
    guard.fallback_precision = "bf16"
    _, state = tiny_state()
    guard.maybe_snapshot(0, state)
    feed(guard, range(1, 6))
    decisions = [guard.inspect(step, 1.0, float("inf")) for step in (6, 8, 9)]
    assert [d.action for d in decisions] == [SKIP, SKIP, ROLLBACK]   # the loss scaler handles the first ones
    assert decisions[-1].new_precision == "bf16" and guard.lr_scale == 1.0  # precision, not LR, was the problem
    assert events[-1]["new_precision"] == "bf16" and events[-1]["overflows_in_window"] == 3


# --- snapshots ---------------------------------------------------------------------------------------------

def tiny_state() -> tuple[torch.nn.Module, LiveObjects]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    model[0].weight.requires_grad_(False)                   # frozen weights are not part of a snapshot
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    return model, LiveObjects(model, optimizer, scheduler, data_position={"epoch": 0, "batch_in_epoch": 0})


def train_steps(state: LiveObjects, n: int) -> None:
    for _ in range(n):
        loss = state.model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        state.optimizer.step()
        state.scheduler.step()
        state.optimizer.zero_grad()


@pytest.mark.parametrize("host", [False, True], ids=["on-device", "host"])
def test_restore_brings_back_weights_optimizer_scheduler_rng_and_data_position_with_lr_backoff(monkeypatch, host):
    """host: an adapter too large to snapshot on its device (LoRA on every expert of a MoE) goes to host memory."""
    import steadytune.training.guard as guard_module

    if host:
        monkeypatch.setattr(guard_module, "SNAPSHOT_ON_DEVICE_BYTES", 0)
    guard, _ = make_guard()
    model, state = tiny_state()
    train_steps(state, 2)
    guard.snapshot(2, state)
    kept = guard.snapshots[-1]
    assert all(t.device.type == "cpu" for t in kept.weights.values())
    assert isinstance(kept.optimizer["state"][0]["exp_avg"], torch.Tensor)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_step = state.optimizer.state_dict()["state"][0]["step"].item()
    lr_at_snapshot = state.optimizer.param_groups[0]["lr"]
    next_random = torch.rand(1)
    for _ in range(2):  # twice: the snapshot must survive a restore
        train_steps(state, 3)
        state.data_position = {"epoch": 1, "batch_in_epoch": 5}
        guard.lr_scale = 0.5
        assert guard.restore(state) == 2
        assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
        assert state.optimizer.state_dict()["state"][0]["step"].item() == saved_step
        assert state.data_position == {"epoch": 0, "batch_in_epoch": 0}
        assert torch.equal(torch.rand(1), next_random)
        assert state.optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * lr_at_snapshot)
        state.scheduler.step()                               # the back-off lasts into future steps
        assert state.optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * 0.1 / 4)
        guard.lr_scale = 1.0


def test_state_dict_round_trips_through_json():
    guard, _ = make_guard()
    feed(guard, range(1, 8))
    guard.inspect(8, float("nan"), 1.0, batch_ids=[4])
    other, _ = make_guard()
    other.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    assert other.summary() == guard.summary() and list(other.loss_history) == list(guard.loss_history)
    assert other.should_skip([4])


@pytest.mark.parametrize("keys, message", [
    ({"grad_norm_schedule": [1.0, "x"]}, "guard.grad_norm_schedule"),
    ({"min_history": 60, "window": 50}, "guard.min_history"),
])
def test_bad_guard_settings_name_the_key(keys, message):
    from steadytune.config import ConfigError
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"guard": keys})


def test_rocm_profile_fills_only_unset_keys_and_says_why():
    cfg = load_config(None, {"learning_rate": 2e-4})
    applied = apply_hardware_profile(cfg, "rocm")
    assert applied == {"warmup_ratio": 0.1, "max_grad_norm": 0.5}
    assert cfg.train.learning_rate == 2e-4 and cfg.train.warmup_ratio == 0.1
    assert "seed 000" in cfg.decisions["max_grad_norm"]["reason"]
    # The user's learning rate is kept; above what converged on ROCm in seed 000 the run says so.
    assert cfg.decisions["learning_rate"]["value"] == 2e-4 and "1e-4" in cfg.decisions["learning_rate"]["reason"]


def test_rocm_profile_records_no_learning_rate_change_it_does_not_make():
    """The default (5e-5) is already below the ceiling seed 000 saw converge: nothing is changed, nothing claimed."""
    cfg = load_config(None, {})
    assert apply_hardware_profile(cfg, "rocm") == {"warmup_ratio": 0.1, "max_grad_norm": 0.5}
    assert cfg.train.learning_rate == 5e-5 and "learning_rate" not in cfg.decisions
    low = load_config(None, {"learning_rate": 1e-4})
    apply_hardware_profile(low, "rocm")
    assert low.train.learning_rate == 1e-4 and "learning_rate" not in low.decisions
    cpu = load_config(None, {})
    before = dict(cpu.decisions)   # only LLaMA-Factory default differences (config.py), no hardware profile
    assert apply_hardware_profile(cpu, "cpu") == {} and cpu.decisions == before


# --- through the training loop -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2")


def write_config(path: Path, folder: Path, output_dir: Path, **keys) -> Path:
    settings = dict(model_name_or_path=str(folder), dataset=ALPACA, dataset_dir=str(sample_dir()),
                    template="qwen", cutoff_len=48, max_samples=32, per_device_train_batch_size=4,
                    finetuning_type="full", learning_rate=3e-3, lr_scheduler_type="constant", max_steps=12,
                    logging_steps=1, save_steps=1000, output_dir=str(output_dir), seed=0,
                    guard={"snapshot_steps": 5, "min_history": 5})
    settings.update(keys)
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def read_lines(output_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (output_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_skip_policy_logs_the_batch_ids_and_finishes_finite(tiny_folder, tmp_path):
    out = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", tiny_folder, out, guard_policy="skip", fault_injection={"nan_loss_step": 6})
    assert cli.main(["train", str(cfg)]) == 0
    lines = read_lines(out)
    [event] = [x for x in lines if x.get("event") == "guard"]
    assert (event["step"], event["kind"], event["action"]) == (6, "nonfinite_loss", "skip")
    assert len(event["batch_ids"]) == 4 and all(0 <= i < 32 for i in event["batch_ids"])
    losses = [x["loss"] for x in lines if "loss" in x and "event" not in x]
    assert len(losses) == 12 and all(isinstance(v, float) and math.isfinite(v) for v in losses)
    summary = [x for x in lines if x.get("event") == "guard_summary"][-1]
    assert summary["events"] == 1 and summary["by_kind"] == {"nonfinite_loss": 1}


def test_abort_saves_the_last_good_checkpoint_and_exits_3(tiny_folder, tmp_path, capsys):
    out = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", tiny_folder, out, guard_policy="abort", fault_injection={"nan_loss_step": 9})
    assert cli.main(["train", str(cfg)]) == EXIT_GUARD_ABORT
    message = capsys.readouterr().err
    assert "stopped the run at step 9" in message and "nonfinite_loss" in message and "checkpoint-8" in message
    checkpoint = latest_checkpoint(out)
    assert checkpoint.name == "checkpoint-8"   # the refused update never reached the weights: 8 good steps kept
    state = read_state(checkpoint)
    assert state.extra["guard"]["counts"] == {"nonfinite_loss:abort": 1}
    from safetensors.torch import load_file
    weights = load_file(checkpoint / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_sigkilled_run_resumes_with_its_guard_state(tiny_folder, tmp_path):
    """A rollback happens, a checkpoint is written, the process is SIGKILLed; the resumed run keeps the
    back-off (LR x0.5, clip 0.5), the event counts, and does not fire the injected fault again."""
    out = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", tiny_folder, out, max_steps=400, save_steps=5,
                       fault_injection={"lr_spike_start": 8, "lr_spike_steps": 2})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "steadytune", "train", str(cfg)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            latest = latest_checkpoint(out)
            if latest is not None and int(latest.name.split("-")[1]) >= 20:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    latest = latest_checkpoint(out)
    saved = read_state(latest).extra["guard"]
    assert saved["rollbacks"] == 1 and saved["lr_scale"] == 0.5, saved
    resume_at = int(latest.name.split("-")[1])

    from steadytune.train import run_training
    result = run_training(load_config(cfg, ["resume_from_checkpoint=true", f"max_steps={resume_at + 3}"]),
                          progress=False)
    assert result.global_step == resume_at + 3
    summary = json.loads((out / "train_results.json").read_text())["guard"]
    assert summary["rollbacks"] == 1 and summary["lr_scale"] == 0.5 and summary["max_grad_norm"] == 0.5
    lines = read_lines(out)
    assert lines[-2]["lr"] == pytest.approx(3e-3 * 0.5)      # the back-off survived the kill
    assert len([x for x in lines if x.get("event") == "fault_injected"]) == 2  # not fired again


def run_with_fp16_overflows(tiny_folder: Path, tmp_path: Path, out: Path):
    """fp16 training whose step 8 overflows, with a guard that switches precision at the first overflow."""
    from steadytune.train import run_training
    cfg = write_config(tmp_path / "c.yaml", tiny_folder, out, fp16=True, bf16=False,
                       guard={"snapshot_steps": 5, "min_history": 5, "max_fp16_overflows": 1},
                       fault_injection={"fp16_overflow_step": 8})
    return run_training(load_config(cfg), progress=False)


@pytest.mark.gpu
def test_repeated_fp16_overflows_continue_in_bf16_or_fp32_from_the_last_good_state(tiny_folder, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("fp16 with loss scaling needs a GPU")
    out = tmp_path / "run"
    assert run_with_fp16_overflows(tiny_folder, tmp_path, out).global_step == 12
    switches = [x for x in read_lines(out) if x.get("action") == "precision_switch"]
    assert switches and switches[0]["new_precision"] in ("bf16", "fp32")
    decisions = yaml.safe_load((out / "run_config.yaml").read_text())["decisions"]
    assert decisions["precision"]["value"] == switches[0]["new_precision"]


def test_fp16_overflow_switch_runs_the_whole_restart_path_on_cpu(tiny_folder, tmp_path, monkeypatch):
    """The loop's side of the precision switch, on CPU: fp16 is forced through the policy function (Accelerate
    runs CPU fp16 autocast without a loss scaler), an injected overflow trips the guard, and the run saves its
    last good state, restarts in a fresh Accelerator in the fallback precision, and finishes from there."""
    from steadytune import train as train_module

    def forced(info, bf16="auto", fp16=False):
        return ("fp16", "test: fp16 forced on CPU") if fp16 is True else ("fp32", "test: fallback")

    monkeypatch.setattr(train_module, "choose_precision", forced)
    out = tmp_path / "run"
    assert run_with_fp16_overflows(tiny_folder, tmp_path, out).global_step == 12
    lines = read_lines(out)
    [switch] = [x for x in lines if x.get("action") == "precision_switch"]
    assert switch["new_precision"] == "fp32" and switch["step"] <= 8
    decisions = yaml.safe_load((out / "run_config.yaml").read_text())["decisions"]
    assert decisions["precision"]["value"] == "fp32" and "precision_switch" in decisions
    losses = [x["loss"] for x in lines if "loss" in x and "event" not in x]
    assert losses and all(math.isfinite(v) for v in losses)
