"""`run_demo` (the `steadytune demo` recipe: zero-shot, train, score again) on a tiny model, for both kinds of
fine-tune: the LoRA adapter goes on the same base model, a full fine-tune is loaded from its output folder."""

from __future__ import annotations

import json

import pytest

from steadytune.config import load_config
from steadytune.demo import run_demo
from steadytune.model.tiny import save_tiny_model

NEG = ["太差了", "很失望", "再也不买了", "包装破损", "讨厌"]
POS = ["很好", "质量不错", "非常满意", "物流很快", "喜欢"]


@pytest.mark.parametrize("finetuning_type,lr", [("lora", "1e-2"), ("full", "2e-3")])
def test_demo_scores_before_and_after_for_lora_and_full(tmp_path, finetuning_type, lr):
    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0)
    rows = [{"text": t, "label": "消极"} for t in NEG] + [{"text": t, "label": "积极"} for t in POS]
    (tmp_path / "reviews.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows * 4),
                                            encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                         encoding="utf-8")
    cfg = load_config(None, [f"model_name_or_path={model_dir}", f"dataset={tmp_path / 'reviews.jsonl'}",
                             f"eval_dataset={tmp_path / 'test.jsonl'}", "template=empty", "label_names=[消极, 积极]",
                             "prompt_template=评论：{text}情感：", "cutoff_len=32", "per_device_train_batch_size=8",
                             "num_train_epochs=40", f"learning_rate={lr}", "warmup_ratio=0", "lr_scheduler_type=constant",
                             f"finetuning_type={finetuning_type}", f"output_dir={tmp_path / 'out'}", "save_steps=1000",
                             "logging_steps=1", "plot_loss=false"])
    summary = run_demo(cfg, force=True)
    written = json.loads((tmp_path / "out" / "demo_results.json").read_text(encoding="utf-8"))
    assert written == summary and summary["test_examples"] == 10 and summary["majority_baseline"] == 0.5
    assert summary["after"]["accuracy"] == 1.0  # the task is trivially learnable: the trained weights were scored
    expected = "adapter_config.json" if finetuning_type == "lora" else "model.safetensors"
    assert (tmp_path / "out" / expected).is_file()


def test_demo_loads_the_model_once_and_trains_the_copy_it_scored(tmp_path, monkeypatch):
    """Zero-shot scoring, training and scoring after share one model: from_pretrained runs once, and the base
    weights training used are the very tensors scored zero-shot (no second copy in memory)."""
    from transformers import AutoModelForCausalLM

    from steadytune import train as train_module

    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0)
    rows = [{"text": t, "label": "消极"} for t in NEG] + [{"text": t, "label": "积极"} for t in POS]
    (tmp_path / "reviews.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                            encoding="utf-8")
    loads, seen = [], {}
    original = AutoModelForCausalLM.from_pretrained.__func__

    def counting(cls, *args, **kwargs):
        model = original(cls, *args, **kwargs)
        loads.append(model)
        seen["before"] = model.model.layers[0].mlp.down_proj.weight.data_ptr()
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(counting))
    adopted = []
    real_adopt = train_module.adopt_model
    monkeypatch.setattr(train_module, "adopt_model", lambda m, *a: adopted.append(m) or real_adopt(m, *a))
    cfg = load_config(None, [f"model_name_or_path={model_dir}", f"dataset={tmp_path / 'reviews.jsonl'}",
                             f"eval_dataset={tmp_path / 'reviews.jsonl'}", "template=empty", "label_names=[消极, 积极]",
                             "prompt_template=评论：{text}情感：", "cutoff_len=32", "per_device_train_batch_size=8",
                             "max_steps=2", f"output_dir={tmp_path / 'out'}", "save_steps=1000", "plot_loss=false"])
    run_demo(cfg, force=True)
    assert len(loads) == 1 and adopted == loads
    layer = loads[0].model.layers[0].mlp.down_proj
    assert layer.base_layer.weight.data_ptr() == seen["before"]  # LoRA wrapped the same weight tensor


def test_the_demo_runs_again_in_its_own_folder(tmp_path):
    """`make demo` twice: the second run replaces the first one's files, as the embedded recipe asks
    (overwrite_output_dir: true), demo_results.json included: it is the demo's own file, listed in the run's manifest,
    not a file no steadytune run wrote."""
    from steadytune.demo import recipe_path
    assert load_config(recipe_path(), []).train.overwrite_output_dir
    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0)
    rows = [{"text": t, "label": "消极"} for t in NEG] + [{"text": t, "label": "积极"} for t in POS]
    (tmp_path / "reviews.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                            encoding="utf-8")
    keys = [f"model_name_or_path={model_dir}", f"dataset={tmp_path / 'reviews.jsonl'}",
            f"eval_dataset={tmp_path / 'reviews.jsonl'}", "template=empty", "label_names=[消极, 积极]",
            "prompt_template=评论：{text}情感：", "cutoff_len=32", "per_device_train_batch_size=8", "max_steps=2",
            f"output_dir={tmp_path / 'out'}", "overwrite_output_dir=true", "save_steps=1000", "plot_loss=false"]
    first = run_demo(load_config(None, keys), force=True)
    second = run_demo(load_config(None, keys), force=True)
    assert second["train_steps"] == first["train_steps"] == 2
    assert json.loads((tmp_path / "out" / "demo_results.json").read_text(encoding="utf-8")) == second
