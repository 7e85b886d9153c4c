"""The long-context memory plan (hardware/long_context.py): what each lever buys at the Qwen2.5-7B shape on 80 and
141 GB GPUs, the fewest layer inputs in host memory, the estimate's parts, and what `doctor --config` and `train` say
with it. (The estimate is checked against measured peaks on a GPU by benchmarks/gpu_longctx.sh.)"""

from __future__ import annotations

import pytest

from steadytune.config import load_config
from steadytune.hardware import long_context as lc
from steadytune.hardware.backend import GPU, HardwareInfo
from steadytune.model.shapes import shape_config


def seven_b():
    from transformers import AutoConfig

    spec = shape_config("qwen2.5-7b", None)
    return AutoConfig.for_model(spec.pop("model_type"), **spec)


H200, H100, RAM = 139.8, 79.2, 128.0


@pytest.mark.parametrize("budget,wanted", [(H200, 950_000), (H100, 500_000)])
def test_each_lever_buys_more_context_and_tiling_with_offloading_reaches_the_issues_lengths(budget, wanted):
    config = seven_b()
    state = lc.lora_run_state_gib(config, 16)
    longest = [lc.longest_context(lever, config, state, budget, RAM, 8192) for lever in lc.LEVERS]
    assert longest == sorted(longest) and len(set(longest)) == 4
    assert longest[-1] >= wanted
    # without host memory, tiling alone roughly doubles what checkpointing reaches at this shape
    assert longest[2] > 2 * longest[0]


def test_the_plan_takes_the_fewest_host_layers_that_fit():
    config, tokens = seven_b(), 500_000
    state = lc.lora_run_state_gib(config, 16)
    fit = lc.fewest_host_layers(config, tokens, state, H100, RAM, 8192)
    assert fit is not None and fit.gpu_gib <= lc.room_gib(H100)
    one_fewer = lc.tiled_estimate(config, tokens, state, 8192, fit.host_layers - 1)
    assert one_fewer.gpu_gib > lc.room_gib(H100)
    assert fit.host_gib == pytest.approx(fit.host_layers * tokens * 3584 * 2 / 2**30)
    assert lc.fewest_host_layers(config, 4_000_000, state, H100, RAM, 8192) is None   # past what any split fits


def test_the_tiled_estimate_counts_layer_inputs_by_where_they_wait():
    config, tokens, x = seven_b(), 100_000, 100_000 * 3584 * 2 / 2**30
    on_gpu = lc.tiled_estimate(config, tokens, 10.0, 8192, 0)
    assert on_gpu.parts["layer inputs"] == pytest.approx(28 * x)
    eight = lc.tiled_estimate(config, tokens, 10.0, 8192, 8)
    assert on_gpu.gpu_gib - eight.gpu_gib == pytest.approx(8 * x)
    everything = lc.tiled_estimate(config, tokens, 10.0, 8192, 28)
    assert everything.parts["layer inputs"] == pytest.approx(2 * x)   # the one in use and the next one, fetched
    assert "28 layer inputs" in everything.describe()


def test_doctor_config_prints_the_longest_cutoff_len_and_the_choice_at_the_configs_length(tmp_path):
    from steadytune.doctor.plan import long_context_findings

    info = HardwareInfo(backend="cuda", torch_version="test", gpus=[GPU(0, "NVIDIA H200", "sm_90", H200)])
    cfg = load_config(None, ["model_name_or_path=Qwen/Qwen2.5-7B-Instruct", "cutoff_len=400000",
                             "per_device_train_batch_size=1", "lora_rank=16"])
    findings = long_context_findings(info, cfg, "config", offline=True)
    texts = [f.what for f in findings]
    assert any("cutoff_len 400,000 is longer than" in t for t in texts)   # the 7B shape's window: 131,072
    assert any(t.startswith("longest cutoff_len for") and "tiling " in t for t in texts)
    assert any("at 400,000 tokens a micro-batch train would use tiling" in t for t in texts)
