"""LLaMA-Factory's training methods in steadytune's own runs: the keys' rules (one line naming the keys), a missing
optimizer library named before anything loads, resuming the new optimizers exactly (their state through a
checkpoint that loads without running code), what a freeze / OFT / PiSSA run leaves behind loading back, and the
speed levers' reasons. Numbers against LLaMA-Factory itself: tests/test_lf_methods.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from steadytune.config import ConfigError, load_config
from steadytune.errors import UserError
from steadytune.model.tiny import save_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("methods") / "qwen2", "qwen2")


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    data = [{"instruction": f"Say {i} " * (1 + i % 5), "input": "", "output": f"{i} " * (1 + i % 3)} for i in range(8)]
    path = tmp_path_factory.mktemp("methods_data") / "d.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def config(tiny: Path, rows: Path, out: Path, **extra):
    return load_config(None, {"model_name_or_path": str(tiny), "dataset": str(rows), "template": "empty",
                              "cutoff_len": 64, "output_dir": str(out), "per_device_train_batch_size": 4,
                              "gradient_accumulation_steps": 1, "learning_rate": 1e-3, "logging_steps": 1,
                              "save_steps": 100, "max_steps": 4, **extra})


@pytest.mark.parametrize("keys, message", [
    ({"use_galore": True}, "use_galore: true trains whole weights: finetuning_type full or freeze (got lora)"),
    ({"finetuning_type": "full", "use_galore": True, "use_muon": True}, "use_galore and use_muon each choose the "
                                                                        "optimizer; set one"),
    ({"finetuning_type": "full", "use_llama_pro": True}, "use_llama_pro is for finetuning_type freeze or lora"),
    ({"finetuning_type": "full", "loraplus_lr_ratio": 16}, "loraplus_lr_ratio is for finetuning_type: lora"),
    ({"stage": "dpo", "pissa_init": True}, "pissa_init with stage dpo"),
    ({"use_dft_loss": True, "use_eaft_loss": True}, "use_dft_loss and use_eaft_loss: choose one loss"),
    ({"stage": "pt", "use_dft_loss": True}, "use_dft_loss is a loss of stage sft (got stage: pt)"),
    ({"finetuning_type": "full", "use_galore": True, "galore_layerwise": True, "gradient_accumulation_steps": 2},
     "galore_layerwise: true steps each weight as its gradient completes, so gradient_accumulation_steps must be 1"),
    ({"finetuning_type": "freeze", "quantization_bit": 4}, "quantization_bit: 4 needs finetuning_type: lora or oft"),
    # issue 67: each of these reached its library and failed there (ZeroDivisionError, AttributeError, a shape
    # RuntimeError inside adam_mini after the model loaded) or updated the wrong way
    ({"finetuning_type": "full", "use_badam": True, "badam_switch_interval": 0}, "badam_switch_interval: 0: BAdam moves"),
    ({"finetuning_type": "full", "use_badam": True, "badam_switch_mode": "fixed"},
     "badam_switch_mode: fixed trains one block only: name it with badam_start_block"),
    ({"use_adam_mini": True}, "use_adam_mini: true trains whole weights: finetuning_type full or freeze (got lora)"),
    ({"finetuning_type": "full", "use_galore": True, "galore_scale": -2}, "galore_scale: -2.0 is out of range"),
    ({"finetuning_type": "full", "use_apollo": True, "apollo_scale": 0}, "apollo_scale: 0.0 is out of range"),
])
def test_method_rules_name_the_keys(keys, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, {"dataset": "x", **keys})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_optimizer_library_is_named_before_loading(monkeypatch, tiny, rows, tmp_path):
    import importlib.util

    from steadytune.train import run_training

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "galore_torch" else real(name, *a))
    cfg = config(tiny, rows, tmp_path / "out", finetuning_type="full", use_galore=True)
    with pytest.raises(UserError, match=r"use_galore: true needs GaLore's library: pip install galore-torch"):
        run_training(cfg, progress=False)


@pytest.mark.parametrize("keys, message", [
    ({"use_badam": True, "badam_start_block": 99},
     "badam_start_block: 99 is past this model's 2 BAdam blocks (0..1, model.layers.0. to model.layers.1.)"),
    ({"use_galore": True, "galore_target": "nosuch"}, "galore_target: 'nosuch' names no linear layer of this model "
                                                       "(down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"),
    ({"use_apollo": True, "apollo_target": "q_proj,nosuch"}, "apollo_target: 'nosuch' names no linear layer"),
])
def test_an_optimizer_key_the_model_cannot_meet_is_refused_before_any_weights_load(keys, message, monkeypatch, tiny,
                                                                                  rows, tmp_path):
    """badam_start_block: 99 on a 2-layer model ended in BAdam's IndexError, galore_target: nosuch ran GaLore on 0
    weights (issue 67): both are checked against the model's names (a meta-device skeleton from its config.json)
    before the weights load, and again on the loaded model."""
    import steadytune.train
    from steadytune.train import run_training
    from steadytune.training.optimizers import build_optimizer

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded before the key was checked")

    monkeypatch.setattr(steadytune.train, "load_model_and_tokenizer", no_loading)
    cfg = config(tiny, rows, tmp_path / "out", finetuning_type="full", **keys)
    with pytest.raises(UserError) as err:
        run_training(cfg, progress=False)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
    from steadytune.model.load import load_model_and_tokenizer
    model, _ = load_model_and_tokenizer(cfg.model)   # the same check on a loaded model (a config without a skeleton)
    with pytest.raises(UserError, match=message.split(" (")[0]):
        build_optimizer(model, cfg, "cpu")


def test_galore_on_frozen_layers_only_is_refused_and_badam_minus_one_stays_on_one_block(tiny, rows, tmp_path):
    """A GaLore target that exists but only in frozen layers projects nothing: refused. badam_switch_interval: -1
    means never switch (LLaMA-Factory's help), but BAdam tests (step + 1) % -1, true at every step: it switched at
    every step; now the first block alone trains."""
    from safetensors.torch import load_file

    from steadytune.train import run_training

    cfg = config(tiny, rows, tmp_path / "frozen", finetuning_type="freeze", freeze_trainable_layers=1,
                 use_galore=True, galore_target="layers.0.")
    with pytest.raises(UserError, match="galore_target: layers.0. matches no trainable weight: the layers it names are "
                                        "frozen"):
        run_training(cfg, progress=False)
    pytest.importorskip("badam", reason="badam is not installed (pip install 'steadytune[optimizers]')")
    run_training(config(tiny, rows, tmp_path / "badam", finetuning_type="full", use_badam=True,
                        badam_switch_interval=-1, badam_switch_mode="ascending", max_steps=3), progress=False)
    base, trained = load_file(tiny / "model.safetensors"), load_file(tmp_path / "badam" / "model.safetensors")
    moved = {name.split(".")[2] for name in base if name.startswith("model.layers.")
             and not torch.equal(base[name], trained[name])}
    assert moved == {"0"}, moved


def test_freeze_trains_the_last_layers_and_saves_a_whole_model(tiny, rows, tmp_path):
    from transformers import AutoModelForCausalLM

    from steadytune.train import run_training

    base = AutoModelForCausalLM.from_pretrained(tiny)
    cfg = config(tiny, rows, tmp_path / "out", finetuning_type="freeze", freeze_trainable_layers=1,
                 freeze_extra_modules="embed_tokens")
    result = run_training(cfg, progress=False)
    saved = AutoModelForCausalLM.from_pretrained(result.output_dir)
    last = base.config.num_hidden_layers - 1
    for (name, before), after in zip(base.state_dict().items(), saved.state_dict().values()):
        moved = not torch.equal(before, after)
        assert moved == (f".{last}." in name or "embed_tokens" in name or "lm_head" in name), name  # tied head
    assert "layers [1]" in cfg.decisions["trainable"]["reason"]


@pytest.mark.parametrize("keys", [{"finetuning_type": "oft", "oft_block_size": 8},
                                  {"pissa_init": True, "pissa_iter": -1}], ids=["oft", "pissa"])
def test_an_oft_or_pissa_adapter_loads_back_with_the_trained_outputs(keys, tiny, rows, tmp_path):
    from transformers import AutoModelForCausalLM

    from steadytune.model.lora import load_trained_adapter
    from steadytune.train import run_training

    cfg = config(tiny, rows, tmp_path / "out", **keys)
    result = run_training(cfg, progress=False)
    trained = result.model.eval()
    loaded = load_trained_adapter(AutoModelForCausalLM.from_pretrained(tiny), result.output_dir).eval()
    ids = torch.tensor([[3, 7, 11, 13, 17]])
    with torch.no_grad():
        want, got = trained(input_ids=ids).logits, loaded(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny)(input_ids=ids).logits
    assert not torch.allclose(want, base, atol=1e-4)   # the adapter changed the model
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_pissa_convert_writes_a_plain_lora_adapter_of_the_original_base(tiny, rows, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from steadytune.train import run_training

    cfg = config(tiny, rows, tmp_path / "out", pissa_init=True, pissa_iter=-1, pissa_convert=True)
    result = run_training(cfg, progress=False)
    converted = result.output_dir / "pissa_converted"
    assert json.loads((converted / "adapter_config.json").read_text())["r"] == 2 * cfg.method.lora_rank
    plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny), converted).eval()
    ids = torch.tensor([[3, 7, 11, 13, 17]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, result.model.eval()(input_ids=ids).logits,
                                   atol=1e-4, rtol=1e-4)


RESUMED = {
    "galore": {"finetuning_type": "full", "use_galore": True, "galore_rank": 4, "galore_update_interval": 2},
    "galore_layerwise": {"finetuning_type": "full", "use_galore": True, "galore_rank": 4, "galore_layerwise": True},
    "apollo": {"finetuning_type": "full", "use_apollo": True, "apollo_rank": 4},
    "badam": {"finetuning_type": "full", "use_badam": True, "badam_switch_interval": 1},
    "adam_mini": {"finetuning_type": "full", "use_adam_mini": True},
    "muon": {"finetuning_type": "full", "use_muon": True},
    "loraplus": {"loraplus_lr_ratio": 16.0},
}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_the_new_optimizers_resume_exactly(name, tiny, rows, tmp_path):
    """4 steps straight, against 2 steps, a checkpoint, and 2 more after a resume: the same losses (the optimizer's
    state, GaLore's and APOLLO's projectors and BAdam's block included, came back through a weights_only load)."""
    from steadytune.train import run_training

    module = {"galore": "galore_torch", "galore_layerwise": "galore_torch", "apollo": "apollo_torch",
              "badam": "badam", "adam_mini": "adam_mini"}.get(name)
    if module:
        pytest.importorskip(module, reason=f"{module} is not installed (pip install 'steadytune[optimizers]')")
    from steadytune.training.run_folder import MANIFEST, read_manifest

    keys = {"lr_scheduler_type": "constant", "save_steps": 2, **RESUMED[name]}
    straight = run_training(config(tiny, rows, tmp_path / "a", **keys), progress=False)
    out = tmp_path / "b"
    first = run_training(config(tiny, rows, out, **{**keys, "max_steps": 2}), progress=False)
    manifest = read_manifest(out)
    manifest["status"] = "running"   # what a run killed after its checkpoint at step 2 leaves
    (out / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    resumed = run_training(config(tiny, rows, out, resume_from_checkpoint=True, **keys), progress=False)
    assert resumed.global_step == 4
    assert first.losses + resumed.losses[-2:] == pytest.approx(straight.losses, rel=1e-5)


def test_the_speed_levers_say_why_they_are_off_for_the_new_methods(tiny, rows, tmp_path):
    from steadytune.training.speed_plan import graph_blockers

    cfg = config(tiny, rows, tmp_path / "x", finetuning_type="full", use_badam=True)
    assert graph_blockers(cfg, fsdp=False)["optimizer"] == "BAdam changes which weights train between steps"
    cfg = config(tiny, rows, tmp_path / "x", use_asft_loss=True)
    assert "reference model" in graph_blockers(cfg, fsdp=False)["loss"]
    cfg = config(tiny, rows, tmp_path / "x", loraplus_lr_ratio=16.0)
    assert not {"optimizer", "loss"} & set(graph_blockers(cfg, fsdp=False))   # LoRA+ is plain LoRA to the graphs


def test_adamw_decays_what_transformers_decays_and_v1_files_decay_everything(tiny, rows, tmp_path):
    from transformers import AutoModelForCausalLM

    from steadytune.model.lora import attach_adapter
    from steadytune.training.optimizers import build_optimizer

    cfg = config(tiny, rows, tmp_path / "x", finetuning_type="full", weight_decay=0.1)
    model = attach_adapter(AutoModelForCausalLM.from_pretrained(tiny), cfg)
    optimizer, why = build_optimizer(model, cfg, "cpu")
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] for p in g["params"]}
    assert decayed and not any("norm" in n or "bias" in n for n in decayed) and "transformers' groups" in why
    cfg.decisions["lf_v1"] = {"value": "read", "reason": "a v1 file"}
    optimizer, why = build_optimizer(model, cfg, "cpu")
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1] and "LLaMA-Factory v1" in why
