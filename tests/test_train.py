"""The training recipe end to end on tiny models: outputs, LLaMA-Factory example, resume equivalence,
golden loss curve, output-folder protection and bad checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import LF_FIXTURES as LF
from conftest import needs_shared
from sample_data import ALPACA, sample_dir

from steadytune.cli import main as cli_main
from steadytune.config import load_config
from steadytune.errors import CheckpointError, UserError
from steadytune.model.tiny import save_tiny_model
from steadytune.train import run_training
from steadytune.training.checkpoint import list_checkpoints
from steadytune.training.monitor import read_metrics

GOLDEN = Path(__file__).resolve().parent / "golden" / "tiny_qwen2_sample_loss.json"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {kind: save_tiny_model(root / kind, kind) for kind in ("qwen2", "llama", "gemma3")}


def classification_file(folder: Path, n: int = 48) -> Path:
    """A small imbalanced two-class dataset in jsonl."""
    rows = []
    for i in range(n):
        positive = i % 3 == 0
        text = ("这个商品很好，非常满意" if positive else "太差了，很失望") + f" #{i}"
        rows.append({"text": text, "label": "积极" if positive else "消极"})
    path = folder / "reviews.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return path


def classification_yaml(folder: Path, model: Path, out: Path, *extra: str) -> Path:
    """A classification run config written the way a user would, on classification_file's data."""
    path = folder / "cls.yaml"
    path.write_text("\n".join([
        f"model_name_or_path: {model}", f"dataset: {classification_file(folder)}", "label_names: [消极, 积极]",
        "prompt_template: \"评论：{text}\\n情感：\"", "template: empty", f"output_dir: {out}",
        "per_device_train_batch_size: 4", "val_size: 0.25", *extra]), encoding="utf-8")
    return path


def sft_overrides(model: Path, out: Path, **extra) -> list[str]:
    base = {"model_name_or_path": str(model), "dataset": ALPACA, "dataset_dir": str(sample_dir()),
            "template": "qwen", "cutoff_len": 64, "max_samples": 64, "output_dir": str(out),
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "learning_rate": 5e-3,
            "max_steps": 6, "logging_steps": 1, "save_steps": 3, "lr_scheduler_type": "cosine",
            "warmup_steps": 1, "lora_rank": 4, "seed": 7}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def train(overrides: list[str]):
    return run_training(load_config(None, overrides), progress=False)


def test_lora_run_writes_every_output(tiny_models, tmp_path):
    out = tmp_path / "run"
    result = train(sft_overrides(tiny_models["qwen2"], out, plot_loss="true", lora_dropout=0.1))
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "run_config.yaml",
                 "metrics.jsonl", "training_loss.png", "train_results.json"):
        assert (out / name).is_file(), name
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-3"]
    steps = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    for key in ("epoch", "loss", "grad_norm", "lr", "tokens", "tokens_per_s", "input_tokens_per_s",
                "target_tokens_per_s"):
        assert key in steps[0]
    for r in steps:  # throughput named for what it counts; tokens_per_s kept for older readers (= input)
        assert r["tokens_per_s"] == r["input_tokens_per_s"] > r["target_tokens_per_s"] > 0
    assert result.input_tokens_per_s > result.tokens_per_s > 0  # prompts are processed, not trained on
    assert result.global_step == 6 and result.final_loss == pytest.approx(steps[-1]["loss"])

    # The adapter loads with plain peft and changes the model's output.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(tiny_models["qwen2"])
    ids = torch.tensor([[5, 6, 7, 8]])
    plain = base(ids).logits
    tuned = PeftModel.from_pretrained(base, out)(ids).logits
    assert not torch.allclose(plain, tuned)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_other_families_train_and_loss_falls(tiny_models, tmp_path, kind):
    result = train(sft_overrides(tiny_models[kind], tmp_path / kind, max_steps=8, learning_rate=2e-2))
    assert result.losses[-1] < result.losses[0]


def test_full_finetuning_saves_a_full_model(tiny_models, tmp_path):
    out = tmp_path / "full"
    train(sft_overrides(tiny_models["qwen2"], out, finetuning_type="full", max_steps=2, learning_rate=1e-4))
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()


@needs_shared
def test_llamafactory_example_runs_with_two_overrides(tiny_models, tmp_path, monkeypatch):
    """The real qwen3_lora_sft.yaml, changing only the model and dataset_dir (plus where to write, and 2 steps)."""
    monkeypatch.chdir(tmp_path)
    code = cli_main(["train", str(LF / "examples" / "train_lora" / "qwen3_lora_sft.yaml"),
                     f"model_name_or_path={tiny_models['qwen2']}", f"dataset_dir={LF / 'data'}", "max_steps=2",
                     "cutoff_len=256"])
    assert code == 0
    out = tmp_path / "saves" / "qwen3-4b" / "lora" / "sft"
    assert (out / "adapter_model.safetensors").is_file()
    assert len([r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]) == 1  # logging_steps 10: the last step
    import yaml
    decisions = yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))["decisions"]
    # Keys of the file that change nothing here are recorded with a reason, not silently dropped.
    assert {"dataloader_num_workers", "preprocessing_num_workers", "ddp_timeout"} <= set(decisions)


def test_gradient_accumulation_normalises_over_tokens(tiny_models, tmp_path):
    """Batch 8 x 1 and batch 4 x 2 see the same examples per step, so the first step's loss and update match."""
    one = train(sft_overrides(tiny_models["qwen2"], tmp_path / "a", per_device_train_batch_size=8,
                              gradient_accumulation_steps=1, max_steps=2))
    two = train(sft_overrides(tiny_models["qwen2"], tmp_path / "b", per_device_train_batch_size=4,
                              gradient_accumulation_steps=2, max_steps=2))
    # Same examples per optimizer step (the order is a permutation of examples; 4x2 takes the same 8).
    assert one.losses[0] == pytest.approx(two.losses[0], rel=1e-5)
    assert one.losses[1] == pytest.approx(two.losses[1], rel=1e-4)


def test_resume_reproduces_the_uninterrupted_curve(tiny_models, tmp_path):
    straight = train(sft_overrides(tiny_models["qwen2"], tmp_path / "straight", lora_dropout=0.1))
    out = tmp_path / "resumed"
    train(sft_overrides(tiny_models["qwen2"], out, lora_dropout=0.1))
    # As if the run had been killed after step 3: continue from checkpoint-3.
    resumed = train(sft_overrides(tiny_models["qwen2"], out, lora_dropout=0.1,
                                  resume_from_checkpoint=str(out / "checkpoint-3")))
    assert resumed.losses == pytest.approx(straight.losses[3:], rel=1e-6)
    logged = [r["loss"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    assert logged == pytest.approx(straight.losses, rel=1e-6)


def test_golden_loss_curve(tiny_models, tmp_path):
    """A committed loss curve: any change to data, masking, loss or the update rule shows up here."""
    result = train(sft_overrides(tiny_models["qwen2"], tmp_path / "golden"))
    if os.environ.get("STEADYTUNE_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({"losses": result.losses}, indent=1), encoding="utf-8")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))["losses"]
    assert result.losses == pytest.approx(golden, rel=2e-4)


def test_classification_run_end_to_end_cli(tiny_models, tmp_path):
    out = tmp_path / "cls"
    cfg_file = classification_yaml(tmp_path, tiny_models["gemma3"], out, "max_steps: 3", "eval_strategy: steps",
                                   "eval_steps: 3", "logging_steps: 1")
    code = cli_main(["train", str(cfg_file)])
    assert code == 0
    evals = [r for r in read_metrics(out / "metrics.jsonl") if "eval_loss" in r]
    assert evals and evals[-1]["step"] == 3


# --- bad input: clear errors, nothing overwritten ------------------------------------------------------------

def test_non_empty_output_dir_is_refused_and_untouched(tiny_models, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes", encoding="utf-8")
    with pytest.raises(UserError, match="is not empty"):
        train(sft_overrides(tiny_models["qwen2"], out, max_steps=1))
    assert (out / "notes.txt").read_text(encoding="utf-8") == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # overwrite_output_dir replaces only what a run writes; the user's notes stay.
    train(sft_overrides(tiny_models["qwen2"], out, max_steps=1, overwrite_output_dir="true"))
    assert (out / "notes.txt").read_text(encoding="utf-8") == "my notes"


def test_truncated_checkpoint_is_refused(tiny_models, tmp_path):
    out = tmp_path / "trunc"
    train(sft_overrides(tiny_models["qwen2"], out, max_steps=3, save_steps=2))
    checkpoint = list_checkpoints(out)[-1]
    weights = checkpoint / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=checkpoint.name):
        train(sft_overrides(tiny_models["qwen2"], out, resume_from_checkpoint=str(checkpoint)))
    (checkpoint / "trainer_state.json").unlink()
    with pytest.raises(CheckpointError, match="trainer_state.json is missing"):
        train(sft_overrides(tiny_models["qwen2"], out, resume_from_checkpoint=str(checkpoint)))


def test_checkpoint_from_another_model_is_refused(tiny_models, tmp_path):
    out = tmp_path / "other"
    train(sft_overrides(tiny_models["qwen2"], out, max_steps=2, save_steps=1))
    checkpoint = list_checkpoints(out)[-1]
    with pytest.raises(CheckpointError, match=checkpoint.name):
        train(sft_overrides(tiny_models["llama"], out, resume_from_checkpoint=str(checkpoint)))


def test_cli_errors_exit_non_zero_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "steadytune", "train", str(tmp_path / "nope.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "nope.yaml: config file not found" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora_rnk: 8\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "steadytune", "train", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "did you mean 'lora_rank'" in proc.stderr


@pytest.mark.parametrize("mode", ["none", "sampler", "loss", "both"])
def test_class_balance_in_the_batch_stream(tmp_path, mode):
    """An imbalanced set (2:1): the sampler evens out the classes drawn; the loss mode adds per-token weights
    that favour the minority class."""
    from steadytune.data.prepare import prepare_datasets
    from steadytune.model.tiny import build_tokenizer
    from steadytune.training.batches import TrainBatches

    data_file = classification_file(tmp_path, n=90)
    cfg = load_config(None, [f"dataset={data_file}", "label_names=[消极, 积极]", "prompt_template=评论：{text}\n情感：",
                             "template=empty", f"class_balance={mode}", "per_device_train_batch_size=10"])
    tokenizer = build_tokenizer()
    data = prepare_datasets(cfg, tokenizer)
    stream = TrainBatches(cfg, data, tokenizer).stream()
    drawn = [0, 0]
    for _ in range(60):
        mb = next(stream)
        for label in mb.batch["label_ids"].tolist():
            drawn[label] += 1
        if mode in ("loss", "both"):
            weights = mb.batch["token_weights"]
            trained = mb.batch["labels"] != -100
            minority = mb.batch["label_ids"] == 1
            if minority.any() and (~minority).any():
                assert weights[minority][trained[minority]].min() > weights[~minority][trained[~minority]].max()
        else:
            assert "token_weights" not in mb.batch
    share = drawn[1] / sum(drawn)
    if mode in ("sampler", "both"):
        assert 0.42 < share < 0.58
    else:
        assert share == pytest.approx(1 / 3, abs=0.02)


def test_shipped_classification_example_trains_and_keeps_its_best_checkpoint(tiny_models, tmp_path):
    """examples/sentiment_classification.yaml, as a user would run it on their own three-class file."""
    rows = [{"text": f"评论 {i} " + ("很好" if i % 3 == 0 else "一般" if i % 3 == 1 else "太差"),
             "label": ["积极", "中性", "消极"][i % 3]} for i in range(60)]
    data = tmp_path / "reviews.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    example = Path(__file__).resolve().parents[1] / "examples" / "sentiment_classification.yaml"
    out = tmp_path / "sent"
    cfg = load_config(example, [f"dataset={data}", f"model_name_or_path={tiny_models['gemma3']}",
                                f"output_dir={out}", "max_steps=4", "eval_steps=2", "save_steps=2"])
    run_training(cfg, progress=False)
    evals = [r for r in read_metrics(out / "metrics.jsonl") if "eval_accuracy" in r]
    assert [r["step"] for r in evals] == [2, 4] and all(0.0 <= r["eval_macro_f1"] <= 1.0 for r in evals)
    summary = json.loads((out / "train_results.json").read_text(encoding="utf-8"))
    best = max(evals, key=lambda r: r["eval_accuracy"])  # the first of equals wins: later ones are not better
    assert summary["best_metric"] == best["eval_accuracy"]
    assert summary["best_checkpoint"] == f"checkpoint-{best['step']}"
    assert (out / summary["best_checkpoint"] / "adapter_model.safetensors").is_file()


def test_training_continues_from_an_existing_adapter(tiny_models, tmp_path):
    first = train(sft_overrides(tiny_models["qwen2"], tmp_path / "a", max_steps=8, learning_rate=2e-2))
    more = train(sft_overrides(tiny_models["qwen2"], tmp_path / "b", max_steps=2, learning_rate=2e-2,
                               adapter_name_or_path=str(tmp_path / "a")))
    fresh = train(sft_overrides(tiny_models["qwen2"], tmp_path / "c", max_steps=2, learning_rate=2e-2))
    # Same first batch for "b" and "c" (same seed): only the starting adapter differs.
    assert more.losses[0] < fresh.losses[0] - 0.01
    assert first.losses[-1] < first.losses[0]


def test_do_predict_after_training_writes_the_evaluation(tiny_models, tmp_path):
    out = tmp_path / "cls"
    cfg_file = classification_yaml(tmp_path, tiny_models["gemma3"], out, "max_steps: 2", "do_predict: true")
    assert cli_main(["train", str(cfg_file)]) == 0
    results = json.loads((out / "eval_results.json").read_text(encoding="utf-8"))
    assert results["task"] == "classification" and results["n"] == 12  # the val_size split of 48
    assert 0.0 <= results["score"]["accuracy"] <= 1.0
    assert (out / "predictions.jsonl").is_file()


def test_unusable_kernel_request_is_an_error_not_a_silent_skip(tiny_models, tmp_path):
    with pytest.raises(UserError, match="use_liger_kernel: true, but"):
        train(sft_overrides(tiny_models["qwen2"], tmp_path / "k", max_steps=1, use_liger_kernel="true"))


def test_gradient_checkpointing_is_a_recorded_decision_and_keeps_the_loss(tiny_models, tmp_path):
    import yaml
    plain = train(sft_overrides(tiny_models["qwen2"], tmp_path / "plain", max_steps=2))
    checkpointed = train(sft_overrides(tiny_models["qwen2"], tmp_path / "gc", max_steps=2,
                                       gradient_checkpointing="true"))
    assert checkpointed.losses == pytest.approx(plain.losses, rel=1e-5)  # recompute changes memory, not math
    for name, expected in (("plain", False), ("gc", True)):
        decisions = yaml.safe_load((tmp_path / name / "run_config.yaml").read_text(encoding="utf-8"))["decisions"]
        assert decisions["gradient_checkpointing"]["value"] is expected


@pytest.mark.parametrize("precision, finetuning, asked, expected", [
    ("bf16", "lora", "auto", torch.bfloat16),      # the default: the frozen base in the compute dtype
    ("bf16", "lora", "bf16", torch.bfloat16),
    ("bf16", "lora", "float32", torch.float32),    # an fp32 copy under autocast, as the plain peft script
    ("bf16", "full", "auto", torch.float32),       # the optimizer updates these weights: fp32 master copy
    ("fp16", "lora", "auto", torch.float32),       # loss scaling keeps fp32 weights
    ("fp32", "lora", "float32", torch.float32),
])
def test_lora_base_dtype_picks_the_frozen_weights_dtype(precision, finetuning, asked, expected):
    from steadytune.config import load_config
    from steadytune.training.speed_plan import choose_base_dtype

    cfg = load_config(None, {"finetuning_type": finetuning, "lora_base_dtype": asked})
    assert choose_base_dtype(cfg, precision) == expected
    # Only a choice that differs from the default is recorded (and printed) with its reason.
    recorded = "lora_base_dtype" in cfg.decisions
    assert recorded == (asked == "float32" and precision == "bf16" and finetuning == "lora")


def test_lora_base_dtype_rejects_other_values():
    from steadytune.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="lora_base_dtype"):
        load_config(None, {"lora_base_dtype": "fp32"})
