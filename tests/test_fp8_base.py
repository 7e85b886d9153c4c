"""fp8_base: the frozen base of a LoRA model multiplied in fp8 (model/fp8_base.py). torch._scaled_mm runs on a CPU
too, so the real kernels' arithmetic is checked here; the speed is for the GPU (bench --fp8-base on)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from fp8_checks import compiled_against_eager

from steadytune.config import load_config
from steadytune.model.fp8_base import fp8_support, set_fast_accumulation, use_fp8_base
from steadytune.model.fp8_matmul import Fp8FrozenLinear, quantize_rows
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


def test_fast_accumulation_is_the_default_and_exact_is_a_switch_away():
    """Both modes pass through to torch._scaled_mm (on a CPU both sum in fp32: the same values)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(Fp8FrozenLinear(torch.nn.Linear(64, 48).to(torch.bfloat16).requires_grad_(False)))
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    assert model[0].fast_accumulation and "fast_accumulation=True" in repr(model)
    fast = model(x)
    assert set_fast_accumulation(model, False) == 1 and not model[0].fast_accumulation
    torch.testing.assert_close(model(x), fast, rtol=1e-2, atol=1e-2)


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
def test_fp8_base_over_a_4bit_base_trains_as_qlora_does(tmp_path):
    """QLoRA with fp8_base: true: the 4-bit bases are unpacked into fp8 (model/fp8_4bit.py), the decision says so,
    each step's loss is the plain QLoRA run's within fp8's rounding, and the adapter is saved over bitsandbytes'
    layers put back."""
    from safetensors import safe_open

    from steadytune.model.fp8_4bit import Fp8Over4bitLinear
    from steadytune.model.quantize import is_quantized, quantized_linear_names

    # 64 wide (bitsandbytes' block), as every real decoder's widths are a multiple of it
    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0, hidden_size=64, intermediate_size=128)
    rows = [{"instruction": f"say {w}", "input": "", "output": w} for w in ["yes", "no", "maybe", "never"] * 8]
    (tmp_path / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text('{"d": {"file_name": "data.json"}}', encoding="utf-8")
    losses, decisions = {}, {}
    for fp8 in (False, True):
        keys = {"model_name_or_path": str(model_dir), "dataset": "d", "dataset_dir": str(tmp_path), "template": "empty",
                "output_dir": str(tmp_path / f"run-{fp8}"), "fp8_base": fp8, "quantization_bit": 4,
                # 1e-2: a steady run (from 2e-2 up this tiny model's loss jumps in both runs, a step apart)
                "learning_rate": 1e-2, "max_steps": 8, "per_device_train_batch_size": 8, "logging_steps": 1,
                "save_steps": 1000, "seed": 0}
        cfg = load_config(None, [f"{k}={v}" for k, v in keys.items()])
        result = run_training(cfg, force=True, progress=False)
        losses[fp8] = [r["loss"] for r in read_metrics(tmp_path / f"run-{fp8}" / "metrics.jsonl") if "loss" in r]
        decisions[fp8] = cfg.decisions["fp8_base"]
        if fp8:
            model = result.model
    on = decisions[True]
    assert on["value"] is True and "4-bit" in on["reason"], on
    assert decisions[False]["value"] is False
    assert len(losses[True]) == len(losses[False]) == 8
    assert losses[True][-1] < losses[True][0]                                               # it learns
    assert max(abs(a - b) / b for a, b in zip(losses[True], losses[False])) < 0.02, losses  # as QLoRA does
    # after training: bitsandbytes' layers are back under the adapter, and only the adapter was saved
    assert is_quantized(model) and len(quantized_linear_names(model)) == 14
    assert not any(isinstance(m, Fp8Over4bitLinear) for m in model.modules())
    with safe_open(str(tmp_path / "run-True" / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all("lora_" in key for key in keys)


def test_fp8_base_over_an_8bit_base_is_off_and_says_why():
    """LLM.int8 multiplies its own way: quantization_bit 8 rules fp8 out (a 4-bit base does not)."""
    from steadytune.model.fp8_base import FP8_OVER_8BIT, config_blocker, decide_fp8_base

    assert config_blocker(load_config(None, ["quantization_bit=8", "fp8_base=true"])) == FP8_OVER_8BIT
    assert config_blocker(load_config(None, ["quantization_bit=4", "fp8_base=true"])) is None
    assert config_blocker(load_config(None, ["fp8_base=true"])) is None
    on, why = decide_fp8_base(torch.nn.Linear(16, 16), True, torch.device("cpu"), "fp32", False, 64, None, 0.0,
                              ruled_out=FP8_OVER_8BIT)
    assert on is False and why == f"off: {FP8_OVER_8BIT}"


def test_it_compiles_without_graph_breaks():
    """On a GPU the decoder layers are compiled (and graphed) by default: the fp8 layer must trace as one graph,
    forward and backward, and give what the eager layer gives (within bf16 rounding of the fused quantisation)."""
    torch.manual_seed(0)
    compiled_against_eager(Fp8FrozenLinear(torch.nn.Linear(64, 48).requires_grad_(False)), 64)


def test_the_default_turns_fp8_on_only_where_it_was_measured_faster():
    """fp8_base unset: on for a CUDA GPU of sm_89+ under bf16 with compiled layers and hidden >= 896; each other
    case names what keeps it off."""
    from steadytune.model.fp8_base import AUTO_MIN_HIDDEN, auto_fp8_blocker

    gpu = torch.device("cuda", 0)
    hopper = "steadytune.model.fp8_base.fp8_support"
    with pytest.MonkeyPatch.context() as mp:   # the device's answer stands in for an H200's (no GPU here)
        mp.setattr(hopper, lambda device: (True, "sm_90 multiplies fp8 at twice the bf16 rate"))
        assert auto_fp8_blocker(gpu, "bf16", True, 896) is None    # the Qwen2.5-0.5B shape
        assert auto_fp8_blocker(gpu, "bf16", True, 3584) is None
        assert f"hidden 640 < {AUTO_MIN_HIDDEN}" in auto_fp8_blocker(gpu, "bf16", True, 640)   # Gemma 3 270M
        assert "not compiled" in auto_fp8_blocker(gpu, "bf16", False, 1536)
        assert "precision fp16" in auto_fp8_blocker(gpu, "fp16", True, 1536)
        mp.setattr(hopper, lambda device: (False, "sm_80 has no fp8 tensor cores"))
        assert auto_fp8_blocker(gpu, "bf16", True, 1536) == "sm_80 has no fp8 tensor cores"
    assert "only on a GPU" in auto_fp8_blocker(torch.device("cpu"), "fp32", True, 4096)


def test_the_default_keeps_fp8_off_where_its_copies_would_turn_checkpointing_on():
    """A budget the bf16 run just fits without checkpointing: the fp8 copies would tip it over, so the default is
    off and says so; with room to spare, or checkpointing already asked for, the copies do not decide it."""
    from peft import LoraConfig, get_peft_model

    from steadytune.hardware.memory import activation_gib, held_gib
    from steadytune.model.fp8_base import default_fp8_blocker, fp8_copies_gib

    model = get_peft_model(build_model("qwen2", seed=0).to(torch.bfloat16), LoraConfig(r=4, target_modules="all-linear"))
    config, gpu, tokens = model.get_base_model().config, torch.device("cuda", 0), 4096
    config.hidden_size = 1536   # the size rule passes (and the small-model checkpointing rule does not apply)
    state, copies = held_gib(model.parameters()), fp8_copies_gib(model)
    need = state + activation_gib(config, tokens, compiled=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("steadytune.model.fp8_base.fp8_support", lambda device: (True, "sm_90"))
        just_fits = (need + copies / 2) / 0.85   # MEMORY_SHARE of this budget lies between the two
        why = default_fp8_blocker(model, gpu, "bf16", True, tokens, just_fits, state)
        assert why is not None and "would turn gradient checkpointing on" in why
        assert default_fp8_blocker(model, gpu, "bf16", True, tokens, 100 * just_fits, state) is None
        assert default_fp8_blocker(model, gpu, "bf16", True, tokens, just_fits, state,
                                   checkpointing_asked=True) is None
    before = held_gib(model.buffers())   # (rotary tables)
    use_fp8_base(model)
    assert held_gib(model.buffers()) - before == pytest.approx(copies, rel=1e-9)   # the estimate is what it adds


def test_restoring_the_base_gives_back_the_bf16_layer_exactly():
    from peft import LoraConfig, get_peft_model

    from steadytune.model.fp8_base import restore_base

    model = get_peft_model(build_model("qwen2", seed=0), LoraConfig(r=4, target_modules="all-linear"))
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    weights, buffers = {n: p for n, p in model.named_parameters()}, dict(model.named_buffers())
    changed, _ = use_fp8_base(model)
    assert restore_base(model) == changed > 0
    assert not any(isinstance(m, Fp8FrozenLinear) for m in model.modules())
    assert dict(model.named_buffers()).keys() == buffers.keys()   # the fp8 copies are gone
    assert all(p is weights[n] for n, p in model.named_parameters())   # the very same tensors, nothing copied
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, before)


def test_a_cpu_run_records_why_the_default_is_off_and_a_trained_model_leaves_with_its_bf16_base(tmp_path):
    """fp8_base unset on a CPU: off, and the decision says why. fp8_base: true on a model the caller loaded (the
    demo's way): after training the same model scores over its plain base, not the fp8 copies."""
    from steadytune.infer.loading import load_for_inference

    model_dir = save_tiny_model(tmp_path / "tiny", "qwen2", seed=0)
    rows = [{"instruction": f"say {w}", "input": "", "output": w} for w in ["yes", "no"] * 8]
    (tmp_path / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text('{"d": {"file_name": "data.json"}}', encoding="utf-8")
    base = {"model_name_or_path": str(model_dir), "dataset": "d", "dataset_dir": str(tmp_path), "template": "empty",
            "max_steps": 2, "per_device_train_batch_size": 4, "save_steps": 1000}
    cfg = load_config(None, [f"{k}={v}" for k, v in {**base, "output_dir": str(tmp_path / "auto")}.items()])
    run_training(cfg, force=True, progress=False)
    decision = cfg.decisions["fp8_base"]
    assert decision["value"] is False and "cpu: fp8 is faster only on a GPU" in decision["reason"]

    cfg = load_config(None, [f"{k}={v}" for k, v in {**base, "output_dir": str(tmp_path / "on"),
                                                     "fp8_base": True}.items()])
    model, _, _, _ = load_for_inference(cfg)
    run_training(cfg, force=True, progress=False, model=model)
    assert cfg.decisions["fp8_base"]["value"] is True
    assert not any(isinstance(m, Fp8FrozenLinear) for m in model.modules())
    assert any(hasattr(m, "lora_A") for m in model.modules())   # the adapter is on it
