"""fp8_base: the frozen base of a LoRA model multiplied in fp8 (model/fp8_base.py). torch._scaled_mm runs on a CPU
too, so the real kernels' arithmetic is checked here; the speed is for the GPU (bench --fp8-base on)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from steadytune.config import load_config
from steadytune.model.fp8_base import Fp8FrozenLinear, fp8_support, quantize_rows, use_fp8_base
from steadytune.model.tiny import build_model, save_tiny_model
from steadytune.train import run_training
from steadytune.training.monitor import read_metrics

pytestmark = pytest.mark.skipif(not fp8_support(torch.device("cpu"))[0], reason="this torch has no fp8 matmul")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_rows_quantise_within_e4m3_rounding_and_zero_rows_stay_zero():
    x = torch.randn(6, 64) * torch.logspace(-3, 3, 6)[:, None]   # rows six orders of magnitude apart
    x[2] = 0
    q, scale = quantize_rows(x)
    back = q.float() * scale
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (6, 1)
    assert torch.all(back[2] == 0) and torch.isfinite(back).all()
    # 3 mantissa bits: each value within 2^-4 of itself, relative, in every row whatever its magnitude
    for row in (0, 1, 3, 4, 5):
        assert relative(back[row], x[row]) < 0.04


@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_input_gradient_follow_the_bf16_layer_and_the_weight_gets_none(bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=bias).to(torch.bfloat16).requires_grad_(False)
    fp8 = Fp8FrozenLinear(linear)
    x = torch.randn(4, 9, 64, dtype=torch.bfloat16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grad = torch.randn(4, 9, 48, dtype=torch.bfloat16)
    out, ref = fp8(x), linear(x_ref)
    (out.float() * grad).sum().backward()
    (ref.float() * grad).sum().backward()
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert relative(out, ref) < 0.06 and relative(x.grad, x_ref.grad) < 0.06
    assert linear.weight.grad is None and fp8.weight is linear.weight   # the layer peft and export see is unchanged
    # and a wrong layout would be far off: the transposed weight's matmul differs by order 1
    assert relative(out, ref) < 0.1 * relative(ref, torch.nn.functional.linear(x_ref, linear.weight.flip(0)))


def test_under_autocast_it_answers_in_the_autocast_dtype():
    fp8 = Fp8FrozenLinear(torch.nn.Linear(32, 16).to(torch.bfloat16).requires_grad_(False))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fp8(torch.randn(3, 32)).dtype == torch.bfloat16


def test_only_frozen_lora_bases_of_fitting_sizes_are_swapped():
    from peft import LoraConfig, get_peft_model

    model = build_model("qwen2", seed=0).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    layers = [m for m in model.modules() if hasattr(m, "lora_A") and isinstance(m.base_layer, torch.nn.Linear)]
    changed, why = use_fp8_base(model)
    fitting = [m for m in layers if m.base_layer.weight.shape[0] % 16 == 0 and m.base_layer.weight.shape[1] % 16 == 0]
    assert changed == len(fitting) == sum(isinstance(m.base_layer, Fp8FrozenLinear) for m in layers) > 0
    assert f"{changed} LoRA layers" in why
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)   # the adapters still train
    assert not any("w_rows" in k for k in model.state_dict())                         # nothing new is saved


def test_the_memory_policy_counts_the_fp8_copies_of_the_base():
    """The checkpointing decision weighs what the model holds; fp8_base's copies (two layouts, 1 byte each, a scale
    per row) are buffers beside the bf16 weights, and must be in that sum or a run that fit in bf16 runs out."""
    from peft import LoraConfig, get_peft_model

    from steadytune.hardware.memory import held_gib

    model = build_model("qwen2", seed=0).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    before = held_gib(model.parameters()) + held_gib(model.buffers())
    use_fp8_base(model)
    swapped = [m for m in model.modules() if isinstance(m, Fp8FrozenLinear)]
    copies = sum(2 * m.weight.numel() + 4 * (m.out_features + m.in_features) for m in swapped) / 2**30
    after = held_gib(model.parameters()) + held_gib(model.buffers())
    assert copies > 0 and after - before == pytest.approx(copies, rel=1e-9)


def test_a_run_with_fp8_base_trains_and_records_the_decision(tmp_path):
    """A tiny run on CPU (an fp32 base there): fp8_base is on, the loss falls as without it, and the decision says why."""
    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0)
    rows = [{"instruction": f"say {w}", "input": "", "output": w} for w in ["yes", "no", "maybe", "never"] * 8]
    (tmp_path / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text('{"d": {"file_name": "data.json"}}', encoding="utf-8")
    losses = {}
    for fp8 in (False, True):
        keys = {"model_name_or_path": str(model_dir), "dataset": "d", "dataset_dir": str(tmp_path), "template": "empty",
                "output_dir": str(tmp_path / f"run-{fp8}"), "fp8_base": fp8,
                "learning_rate": 3e-2, "max_steps": 20, "per_device_train_batch_size": 8, "logging_steps": 1,
                "save_steps": 1000, "seed": 0}
        cfg = load_config(None, [f"{k}={v}" for k, v in keys.items()])
        run_training(cfg, force=True, progress=False)
        losses[fp8] = [r["loss"] for r in read_metrics(tmp_path / f"run-{fp8}" / "metrics.jsonl") if "loss" in r]
        if fp8:
            decisions = cfg.decisions
            assert decisions["fp8_base"]["value"] is True, decisions["fp8_base"]
    assert losses[True][-1] < losses[True][0] - 0.1                                    # it learns
    assert max(abs(a - b) for a, b in zip(losses[True], losses[False])) < 0.02 * losses[False][0]  # as without fp8


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None,
                    reason="bitsandbytes is not installed (pip install 'steadytune[qlora]')")
def test_fp8_base_over_a_4bit_base_is_off_and_says_why(tmp_path):
    """QLoRA's base is bitsandbytes' already: fp8_base: true beside quantization_bit: 4 trains as QLoRA and records
    why fp8 is off, instead of the count of 0 layers it could swap."""
    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0)
    rows = [{"instruction": f"say {w}", "input": "", "output": w} for w in ["yes", "no"] * 8]
    (tmp_path / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text('{"d": {"file_name": "data.json"}}', encoding="utf-8")
    keys = {"model_name_or_path": str(model_dir), "dataset": "d", "dataset_dir": str(tmp_path), "template": "empty",
            "output_dir": str(tmp_path / "run"), "fp8_base": True, "quantization_bit": 4, "max_steps": 2,
            "per_device_train_batch_size": 4, "save_steps": 1000}
    cfg = load_config(None, [f"{k}={v}" for k, v in keys.items()])
    run_training(cfg, force=True, progress=False)
    decision = cfg.decisions["fp8_base"]
    assert decision["value"] is False and "quantization_bit 4: bitsandbytes holds the base" in decision["reason"]


def test_it_compiles_without_graph_breaks():
    """On a GPU the decoder layers are compiled (and graphed) by default: the fp8 layer must trace as one graph,
    forward and backward, and give what the eager layer gives (within bf16 rounding of the fused quantisation)."""
    torch.manual_seed(0)
    fp8 = Fp8FrozenLinear(torch.nn.Linear(64, 48).requires_grad_(False))
    compiled = torch.compile(fp8, fullgraph=True)
    x = torch.randn(8, 64, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = compiled(x), fp8(x_eager)
    out.float().sum().backward()
    ref.float().sum().backward()
    assert out.dtype == ref.dtype == torch.bfloat16
    assert relative(out, ref) < 0.01 and relative(x.grad, x_eager.grad) < 0.01
