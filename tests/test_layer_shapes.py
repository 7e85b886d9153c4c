"""Estimates read each layer's shape (hardware/layer_shapes.py): Gemma 4's full-attention layers have heads of another
size than its sliding ones, and transformers 5.2x refuses `config.head_dim` there (a RuntimeError every memory and
parameter estimate raised for a Gemma 4 run)."""

from __future__ import annotations

import transformers

from steadytune.hardware.layer_shapes import largest_head_dim, layer_shapes
from steadytune.hardware.long_context import Shape
from steadytune.hardware.memory import estimate_parameters, linear_parameters, lora_parameters
from steadytune.model.shapes import shape_config
from steadytune.model.tiny import build_model

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def projection_weights(model) -> int:
    return sum(m.weight.numel() for name, m in model.named_modules()
               if name.rsplit(".", 1)[-1] in PROJECTIONS and ".layers." in name)


def test_the_linear_parameters_of_a_model_with_two_head_sizes_are_counted_layer_by_layer():
    for kind in ("gemma4", "qwen2"):
        model = build_model(kind)
        config = getattr(model.config, "text_config", model.config)
        assert linear_parameters(config) == projection_weights(model), kind
    gemma = build_model("gemma4").config
    sizes = {s.head_dim for s in layer_shapes(gemma)}
    assert len(sizes) == 2 and largest_head_dim(gemma) == max(sizes)


def test_every_estimate_answers_for_the_gemma4_shapes():
    for name in ("gemma4-e2b", "gemma4-31b"):
        values = shape_config(name)
        config = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
        assert estimate_parameters(config) > linear_parameters(config) > 0
        assert lora_parameters(config, 8) > 0
        assert Shape.of(config).head_dim == largest_head_dim(config) >= 256
    big = shape_config("gemma4-31b")
    config = transformers.AutoConfig.for_model(big.pop("model_type"), **big)
    assert 29e9 < estimate_parameters(config) < 34e9     # Gemma 4 31B
