"""LLaMA-Factory's fp8 training keys: where it may run (decided before anything loads), which layers it converts
(LLaMA-Factory's module filter), and torchao's swap itself where torchao is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from steadytune.config import load_config
from steadytune.errors import UserError
from steadytune.model.tiny import build_model
from steadytune.training.fp8_training import (
    fp8_hardware_blocker,
    fp8_layer_names,
    plan_fp8_training,
    takes_fp8,
)


def plan(backend="cuda", arch="sm_90", **keys):
    cfg = load_config(None, [f"{k}={v}" for k, v in {"finetuning_type": "full", "fp8": True, **keys}.items()])
    return plan_fp8_training(cfg.train, cfg.method, cfg.model, backend, arch)


@pytest.mark.parametrize("backend, arch, runs", [
    ("cuda", "sm_89", True), ("cuda", "sm_90", True), ("cuda", "sm_100", True), ("cuda", "sm_120", True),
    ("cuda", "sm_86", False), ("cuda", "sm_80", False), ("cuda", None, False),
    ("rocm", "gfx942", True), ("rocm", "gfx950", True), ("rocm", "gfx90a", False), ("rocm", "gfx1100", False),
    ("cpu", None, False), ("mps", None, False),
])
def test_fp8_runs_only_where_the_gpu_multiplies_fp8(backend, arch, runs):
    assert (fp8_hardware_blocker(backend, arch) is None) is runs


def test_fp8_refusals_name_the_key_and_the_reason():
    with pytest.raises(UserError, match=r"fp8: cpu: fp8 training needs a GPU with fp8 matmuls \(NVIDIA compute "
                                        r"capability 8.9\+, AMD MI300/MI350\)"):
        plan("cpu", None)
    with pytest.raises(UserError, match="sm_80 has no fp8 tensor cores"):
        plan("cuda", "sm_80")
    with pytest.raises(UserError, match="fp8_backend: te is not supported"):
        plan(fp8_backend="te")
    with pytest.raises(UserError, match="for LoRA, fp8_base: true"):
        plan(finetuning_type="lora")
    with pytest.raises(UserError, match="fp8_enable_fsdp_float8_all_gather: true needs fp8: true"):
        plan(fp8=False, fp8_enable_fsdp_float8_all_gather=True)
    assert plan(fp8=False) is None


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_the_plan_on_a_gpu_that_takes_it_says_what_it_does():
    p = plan(fp8_enable_fsdp_float8_all_gather=True)
    assert p.recipe == "rowwise" and "changes nothing under rowwise" in p.why


def test_llamafactorys_module_filter():
    model = build_model("qwen2", hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    names = fp8_layer_names(model)
    # every projection of every layer (k/v: 2 heads x 8 = 16 wide), no embedding, no head
    assert len(names) == 2 * 7 and not any("embed" in n or "lm_head" in n for n in names)
    assert {n.rsplit(".", 1)[1] for n in names} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                      "down_proj"}
    assert not takes_fp8(nn.Linear(32, 24), "model.layers.0.mlp.up_proj")     # 24 is no multiple of 16
    assert not takes_fp8(nn.Linear(32, 32), "score.classifier")
    assert not takes_fp8(nn.Embedding(10, 16), "model.tok")                   # no 2-D Linear weight named so
    assert takes_fp8(nn.Linear(32, 48), "model.layers.0.mlp.up_proj")


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_torchao_swaps_exactly_the_filtered_layers():
    from torchao.float8.float8_linear import Float8Linear

    from steadytune.training.fp8_training import Fp8Plan, convert_to_fp8

    model = build_model("qwen2")
    before = {n: p for n, p in model.named_parameters()}
    assert convert_to_fp8(model, Fp8Plan("rowwise", "")) == len(fp8_layer_names(model))
    swapped = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert swapped == set(fp8_layer_names(model))
    assert not isinstance(model.lm_head, Float8Linear)
    after = dict(model.named_parameters())
    assert all(after[n] is p for n, p in before.items())   # the same Parameters: the optimizer sees the weights
    assert torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])


GOLDEN = json.loads((Path(__file__).parent / "golden" / "lf_fp8.json").read_text(encoding="utf-8"))
MODELS = {"qwen2": ("qwen2", {}), "llama": ("llama", {}),
          "qwen2_unaligned": ("qwen2", {"hidden_size": 40, "intermediate_size": 72, "num_attention_heads": 5,
                                        "num_key_value_heads": 5})}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_converted_layers_are_llamafactorys(name):
    """LLaMA-Factory 0.9.5's own module filter, run on the same tiny models (tools/make_lf_fp8_golden.py): the same
    layers (the untied llama head, and widths that are no multiple of 16, left out)."""
    kind, overrides = MODELS[name]
    assert fp8_layer_names(build_model(kind, **overrides)) == GOLDEN["layers"][name]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the fp8 extra)")
def test_the_recipe_is_llamafactorys():
    from torchao.float8 import Float8LinearConfig

    from steadytune.training.fp8_training import RECIPE

    config = Float8LinearConfig.from_recipe_name(RECIPE)
    assert config.cast_config_input.scaling_granularity.value == GOLDEN["scaling"]
