"""QLoRA (quantization_bit): LLaMA-Factory's keys and their errors, the hardware policy's bitsandbytes gates, doctor's
answers, and real 4-bit / 8-bit training on bitsandbytes' CPU backend with tiny models: loss going down, what stays in
higher precision, exact resume, an evaluation mid-run, the guard, export's merge into the dequantised base, and loading
a QLoRA run for inference. The bitsandbytes tests skip with the reason where it is not installed."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import torch
import yaml
from conftest import LF_FIXTURES, needs_shared
from sample_data import ALPACA, sample_dir

from steadytune.config import ConfigError, load_config
from steadytune.errors import UserError
from steadytune.hardware.backend import detect
from steadytune.hardware.memory import run_memory_gib
from steadytune.hardware.quantization import (
    bitsandbytes_status,
    choose_compute_dtype,
    quantised_bytes_per_parameter,
    quantized_memory,
    speed_blockers,
)
from steadytune.hardware.speed import plan_speed

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None
needs_bnb = pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed (pip install 'steadytune[qlora]')")


# --- the keys ----------------------------------------------------------------------------------------------------

def test_keys_default_as_llamafactory():
    m = load_config(None, {"quantization_bit": 4}).model
    assert (m.quantization_bit, m.quantization_method, m.quantization_type, m.double_quantization) == \
        (4, "bnb", "nf4", True)
    assert load_config(None, {}).model.quantization_bit is None


@pytest.mark.parametrize("keys, message", [
    ({"quantization_bit": 3}, "quantization_bit: invalid value 3"),
    ({"quantization_bit": 4, "quantization_method": "hqq"}, "not supported: quantization_method: hqq"),
    ({"quantization_bit": 8, "quantization_method": "eetq"}, "not supported: quantization_method: eetq"),
    ({"quantization_bit": 4, "quantization_type": "int4"}, "quantization_type: invalid value 'int4'"),
    ({"quantization_bit": 4, "finetuning_type": "full"}, "quantization_bit: 4 needs finetuning_type: lora"),
    ({"quantization_device_map": "auto"}, "not supported: quantization_device_map"),
])
def test_bad_keys_fail_in_one_line_naming_key_and_file(tmp_path, keys, message):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(keys), encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    text = str(error.value)
    assert message in text and str(path) in text and "\n" not in text


def test_v1_quant_config_is_read_as_our_keys(tmp_path):
    path = tmp_path / "v1.yaml"
    path.write_text("model: m\npeft_config:\n  name: lora\nquant_config:\n  name: bnb\n  quantization_bit: 8\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.model.quantization_bit == 8 and cfg.model.quantization_method == "bnb"
    path.write_text("model: m\nquant_config:\n  name: hqq\n  quantization_bit: 4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not supported: quant_config: hqq"):
        load_config(path)


@needs_shared
@pytest.mark.parametrize("example, bits, double", [
    ("train_qlora/qwen3_lora_sft_otfq.yaml", 4, True),
    ("train_qlora/qwen3_lora_sft_bnb_npu.yaml", 4, False),
    ("extras/fsdp_qlora/llama3_lora_sft.yaml", 4, True),
    ("v1/train_qlora/quantization.yaml", 4, True),
])
def test_llamafactory_qlora_examples_load(example, bits, double):
    m = load_config(LF_FIXTURES / "examples" / example).model
    assert (m.quantization_bit, m.quantization_method, m.double_quantization) == (bits, "bnb", double)


# --- the hardware policy -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend, arch, installed, usable, floor", [
    ("cpu", None, "0.50.2", True, "0.50.0"),
    ("cpu", None, "0.49.2", False, "0.50.0"),
    ("cuda", "sm_90", "0.46.1", True, "0.46.1"),
    ("cuda", "sm_90", "0.45.0", False, "0.46.1"),
    ("rocm", "gfx942", "0.49.2", False, "0.50.0"),   # CDNA 4-bit kernels from 0.49.2, but NaN until 0.50.0
    ("rocm", "gfx942", "0.50.2", True, "0.50.0"),
    ("rocm", "gfx1100", "0.49.0", False, "0.50.0"),  # RDNA from 0.49.0; NaN-free from 0.50.0
    ("rocm", "gfx1100", "0.50.0", True, "0.50.0"),
    ("rocm", "gfx90a", "0.50.1", True, "0.50.0"),
])
def test_bitsandbytes_gates(backend, arch, installed, usable, floor):
    status = bitsandbytes_status(backend, arch, installed, look_up=False)
    assert (status.usable, status.floor) == (usable, floor)
    if not usable:
        assert status.fix.startswith("pip install -U") and floor in status.fix


def test_missing_bitsandbytes_says_the_install_command():
    cpu = bitsandbytes_status("cpu", None, None, look_up=False)
    assert not cpu.usable and cpu.fix == "pip install 'bitsandbytes>=0.50.0'"
    # ROCm: --no-deps, so pip does not replace the ROCm torch with a PyPI build
    assert bitsandbytes_status("rocm", "gfx942", None, look_up=False).fix == \
        "pip install --no-deps 'bitsandbytes>=0.50.0'"
    # an arch no wheel has kernels for: the source build for exactly that arch
    old = bitsandbytes_status("rocm", "gfx906", "0.50.2", look_up=False)
    assert not old.usable and "-DBNB_ROCM_ARCH=gfx906" in old.fix


def test_compute_dtype_follows_precision():
    assert choose_compute_dtype("bf16")[0] == "bfloat16"
    assert choose_compute_dtype("fp16")[0] == "float16"
    assert choose_compute_dtype("fp32")[0] == "float32"


def test_eight_bit_rules_out_graphs_and_compile_four_bit_does_not():
    assert set(speed_blockers(8)) == {"cuda_graphs", "torch_compile"}
    assert speed_blockers(4) == {} and speed_blockers(None) == {}
    plan = plan_speed("cuda", "varlen", 1000, blockers={"quantization": speed_blockers(8)["cuda_graphs"]},
                      compile_asked=None)
    assert not plan.cuda_graphs and "LLM.int8" in plan.reasons["cuda_graphs"]


def test_memory_estimate_puts_a_7b_qlora_run_on_a_16_gb_card():
    from steadytune.doctor.plan import _shape_config

    config = _shape_config("qwen2.5-7b")
    four = quantised_bytes_per_parameter(4, True)
    assert 0.51 < four < 0.52 and quantised_bytes_per_parameter(4, False) == 0.5625
    need_4bit, parts = run_memory_gib(config, 2048, 16, checkpointing=True, quantized_bytes=four)
    need_bf16, _ = run_memory_gib(config, 2048, 16, checkpointing=True)
    assert need_4bit < 16 < need_bf16, parts
    shown, why = quantized_memory(config, 2048, 16, True, 4, True)
    assert shown.startswith("~") and "unquantised base" in why
    # the start-up print of a compiled run counts what recompute_pointwise keeps (on by default there)
    kept, _ = run_memory_gib(config, 16384, 16, False, four, compiled=True)
    lean, lean_parts = run_memory_gib(config, 16384, 16, False, four, compiled=True, recompute_pointwise=True)
    assert lean < 0.8 * kept and "elementwise results recomputed" in lean_parts


def test_doctor_config_says_what_the_quantised_run_needs(tmp_path):
    from steadytune.doctor.plan import train_plan_findings

    path = tmp_path / "q.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nquantization_bit: 4\ncutoff_len: 2048\n",
                    encoding="utf-8")
    findings = train_plan_findings(detect(), "config", load_config(path), offline=False)
    memory = [f for f in findings if "the run needs" in f.what]
    assert memory and "4-bit nf4 base" in memory[0].what and "unquantised base" in memory[0].why
    assert any("quantization_bit: 4" in f.what for f in findings)


def test_doctor_reports_bitsandbytes_and_its_gates():
    from steadytune.doctor.packages import qlora_findings

    [absent] = qlora_findings("cpu", None, None)
    assert absent.severity == "info" and absent.fix == "pip install 'bitsandbytes>=0.50.0'"
    [old] = qlora_findings("rocm", "gfx942", "0.49.2")
    assert old.severity == "warning" and "NaN" in old.what and "0.49.2 (PR #1887)" in old.why
    [ok] = qlora_findings("cuda", "sm_90", "0.50.2")
    assert ok.severity == "info" and "can run here" in ok.what


# --- real training on bitsandbytes' CPU backend ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    """A tiny Qwen2 whose widths are multiples of bitsandbytes' block of 64 (as every real decoder's are)."""
    from steadytune.model.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("qlora") / "qwen2", "qwen2", hidden_size=64, intermediate_size=128)


def overrides(model: Path, out: Path, **extra) -> dict:
    keys = {"model_name_or_path": str(model), "dataset": ALPACA, "dataset_dir": str(sample_dir()),
            "template": "qwen", "cutoff_len": 64, "max_samples": 32, "output_dir": str(out),
            "per_device_train_batch_size": 4, "learning_rate": 2e-2, "max_steps": 6, "logging_steps": 1,
            "save_steps": 3, "lora_rank": 8, "seed": 3, "quantization_bit": 4}
    keys.update(extra)
    return keys


def train(model: Path, out: Path, **extra):
    from steadytune.train import run_training

    return run_training(load_config(None, overrides(model, out, **extra)), progress=False)


@needs_bnb
@pytest.mark.parametrize("bits", [4, 8])
def test_quantised_base_trains_and_says_what_stays_in_higher_precision(tiny64, tmp_path, capsys, bits):
    from steadytune.model.quantize import is_quantized, quantized_linear_names

    result = train(tiny64, tmp_path / "run", quantization_bit=bits, max_steps=8)
    assert result.losses[-1] < result.losses[0]
    assert is_quantized(result.model) and len(quantized_linear_names(result.model)) == 14
    printed = capsys.readouterr().out
    assert "quantization " in printed and "higher_precision embeddings" in printed and "norms" in printed
    assert "memory_estimate ~" in printed and "MiB" in printed
    record = yaml.safe_load((tmp_path / "run" / "run_config.yaml").read_text(encoding="utf-8"))
    assert record["quantization_bit"] == bits
    assert record["decisions"]["higher_precision"]["value"].endswith(": float32")   # the CPU's load dtype
    assert record["decisions"]["bnb_compute_dtype"]["value"] == "float32"
    # only LoRA's weights were saved: the adapter holds no quantised tensor
    from safetensors import safe_open
    with safe_open(str(tmp_path / "run" / "adapter_model.safetensors"), "pt") as f:
        assert all("lora_" in key for key in f.keys())


@needs_bnb
def test_resume_reproduces_the_uninterrupted_curve(tiny64, tmp_path):
    straight = train(tiny64, tmp_path / "straight")
    out = tmp_path / "resumed"
    train(tiny64, out)
    resumed = train(tiny64, out, resume_from_checkpoint=str(out / "checkpoint-3"))
    assert resumed.losses == pytest.approx(straight.losses[3:], rel=1e-6)


@needs_bnb
def test_evaluation_mid_run_and_the_guard_compose(tiny64, tmp_path):
    """An evaluation between steps must not leave bitsandbytes' CPU inference layout behind (it has no backward),
    and the guard's snapshots and rollback hold only LoRA's weights beside a quantised base."""
    result = train(tiny64, tmp_path / "run", val_size=0.25, eval_strategy="steps", eval_steps=2, max_steps=6,
                   **{"fault_injection": {"nan_loss_step": 4}})
    assert result.exit_code == 0 and len(result.losses) >= 5
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_loss" in m for m in metrics)
    assert {"event": "guard", "kind": "nonfinite_loss", "action": "skip"}.items() <= next(
        m for m in metrics if m.get("event") == "guard").items()


@needs_bnb
def test_unpacked_batches_train_too(tiny64, tmp_path):
    result = train(tiny64, tmp_path / "run", packing=False, quantization_type="fp4", double_quantization=False)
    assert result.losses[-1] < result.losses[0]


@needs_bnb
@pytest.mark.parametrize("kind, label", [("fsdp", "FSDP2 (full shard)"), ("deepspeed", "ZeRO-3")])
def test_sharding_is_refused_in_one_line(kind, label):
    """DeepSpeed / FSDP flatten parameters of one dtype; bitsandbytes' packed weights are not that. The recipe's
    quantisation phase refuses the plan before any weights load (the plan itself, without starting it: an FSDP set-up
    leaves Accelerate's process-wide state behind)."""
    from steadytune.distributed.sharding import ShardingPlan
    from steadytune.model.quantize import plan_quantization

    cfg = load_config(None, {"quantization_bit": 4})
    with pytest.raises(UserError, match=re.escape(f"quantization_bit: 4 with {label}")) as error:
        plan_quantization(cfg, detect(), "fp32", ShardingPlan(kind, label, f"{kind} set"))
    assert "\n" not in str(error.value)
    assert plan_quantization(cfg, detect(), "fp32", ShardingPlan("ddp", "DDP", "2 processes")) == torch.float32


@needs_bnb
def test_inference_loads_the_base_quantised_again_and_export_merges_dequantised(tiny64, tmp_path, capsys):
    from peft import PeftModel

    from steadytune.infer.export import export_merged
    from steadytune.infer.loading import load_run, open_run
    from steadytune.model.quantize import is_quantized, keep_training_layout

    run_dir = tmp_path / "run"
    train(tiny64, run_dir, max_steps=4)
    ids = torch.tensor([[5, 17, 33, 60, 81, 99, 120, 7]])

    model, _ = load_run(open_run(str(run_dir)), device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    assert isinstance(model, PeftModel) and is_quantized(model)
    # bitsandbytes' CPU inference kernel (AVX512-BF16) multiplies in bf16; the plain layout dequantises to fp32, the
    # dtype the merge computes in, so the two compare to fp32 rounding
    keep_training_layout(model)
    with torch.no_grad():
        trained_logits = model(input_ids=ids).logits
        with model.disable_adapter():
            base_logits = model(input_ids=ids).logits
    assert not torch.allclose(trained_logits, base_logits, atol=1e-4)   # the adapter changes something

    out = tmp_path / "merged"
    report = export_merged(open_run(str(run_dir)), out, verify=False)
    assert "trained on a 4-bit base" in capsys.readouterr().err
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert "quantization_config" not in config and report["dtype"] == "float32"   # the base's own dtype
    assert yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))["quantization_bit"] is None
    merged, _ = load_run(open_run(str(out)), device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    assert not is_quantized(merged)
    with torch.no_grad():
        merged_logits = merged(input_ids=ids).logits
    # the merge went into the dequantised 4-bit base: the model that was trained, within fp32 rounding
    assert torch.allclose(merged_logits, trained_logits, atol=2e-4, rtol=1e-4)


@needs_bnb
def test_a_model_scored_before_it_trains_trains(tiny64, tmp_path):
    """The demo's order: load for inference, score (eval mode, no grad), then train the same model. On a CPU with
    AVX512-BF16, bitsandbytes 0.50 rewrites each 4-bit weight into its inference layout at that scoring, which has no
    backward; train puts it back (keep_training_layout) and trains, with the same outputs as before the rewrite."""
    from steadytune.infer.loading import load_for_inference
    from steadytune.model.quantize import keep_training_layout
    from steadytune.train import run_training

    cfg = load_config(None, overrides(tiny64, tmp_path / "run", max_steps=2))
    model, _, _, _ = load_for_inference(cfg, device=torch.device("cpu"), dtype=torch.float32)
    ids = torch.tensor([[5, 17, 33, 60, 81, 99, 120, 7]])
    model.eval()
    with torch.no_grad():
        plain = model(input_ids=ids, labels=ids).loss   # the first eval forward computes before any rewrite
        model(input_ids=ids)
    states = [m.weight.quant_state for m in model.modules() if type(m).__name__ == "Linear4bit"]
    if not any(getattr(s, "packing_format_for_cpu", False) for s in states):
        pytest.skip("bitsandbytes did not rewrite the weights for its CPU kernel here (no AVX512-BF16)")
    keep_training_layout(model)
    states = [m.weight.quant_state for m in model.modules() if type(m).__name__ == "Linear4bit"]
    assert not any(getattr(s, "packing_format_for_cpu", False) for s in states)
    with torch.no_grad():
        again = model(input_ids=ids, labels=ids).loss
    assert torch.allclose(again, plain, rtol=1e-2), (again, plain)   # the same weights back (absmaxes re-encoded)
    result = run_training(cfg, progress=False, model=model)
    assert result.global_step == 2


@needs_bnb
def test_gpu_bench_script_runs_its_cpu_smoke(tmp_path, capsys):
    """benchmarks/qlora_bench.py's arms on the tiny shape, in this process: the same data, numbers in every column a
    CPU can give (peak memory is a GPU's)."""
    from conftest import load_benchmark

    bench = load_benchmark("qlora_bench")
    model_dir = bench.make_model_folder("tiny", tmp_path / "model", "cpu")
    rows = []
    for arm in ("qlora", "plain_qlora"):
        rows += bench.run_arm(arm, model_dir, tmp_path, [64], steps=3, device="cpu")
    assert [r["arm"] for r in rows] == ["qlora", "plain_qlora"]
    assert all(r["tokens_per_s"] > 0 and math.isfinite(r["loss"]) for r in rows), rows
    assert rows[0]["estimate"].startswith("~") and rows[0]["gradient_checkpointing"] is True
    assert "qlora" in bench.table(rows) and "plain_qlora" in bench.table(rows)


@pytest.fixture(scope="module")
def chat_tiny64(tmp_path_factory):
    """tools/run_lf_examples.py's stand-in (a tokenizer that knows every template's special tokens), 64 wide."""
    from steadytune.model.tiny import build_chat_tokenizer, save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("lf") / "tiny", "qwen2", tokenizer=build_chat_tokenizer("bytelevel"),
                           hidden_size=64, intermediate_size=128)


@needs_bnb
@needs_shared
@pytest.mark.parametrize("example", ["train_qlora/qwen3_lora_sft_otfq.yaml", "train_qlora/qwen3_lora_sft_bnb_npu.yaml",
                                     "extras/fsdp_qlora/llama3_lora_sft.yaml"])
def test_llamafactory_qlora_examples_train(example, chat_tiny64, tmp_path):
    """LF's on-the-fly QLoRA files train with only the model and the data folder changed (cut to 2 steps)."""
    from steadytune.train import run_training

    cfg = load_config(LF_FIXTURES / "examples" / example,
                      [f"model_name_or_path={chat_tiny64}", f"dataset_dir={LF_FIXTURES / 'data'}", "max_steps=2",
                       "max_samples=16", f"output_dir={tmp_path / 'out'}", "cutoff_len=128"])
    result = run_training(cfg, progress=False)
    assert result.exit_code == 0 and result.global_step == 2
    assert cfg.decisions["quantization"]["value"].startswith("4-bit nf4")


@needs_bnb
@needs_shared
def test_llamafactory_v1_qlora_file_stops_at_its_fsdp_in_one_line(chat_tiny64, tmp_path):
    from steadytune.distributed.sharding import plan_sharding
    from steadytune.model.quantize import plan_quantization

    cfg = load_config(LF_FIXTURES / "examples" / "v1" / "train_qlora" / "quantization.yaml",
                      [f"model_name_or_path={chat_tiny64}"])
    with pytest.raises(UserError, match="quantization_bit: 4 with FSDP2"):
        plan_quantization(cfg, detect(), "fp32", plan_sharding(cfg, 1))
