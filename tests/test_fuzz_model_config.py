"""Hypothesis against a model folder's config.json (issue 67, round 5, this wave's models): any value of the fields the
2026 models and long context read (layer_types of a gated DeltaNet hybrid, rope_parameters, max_position_embeddings)
either builds a model whose forward is finite, or is one line naming config.json before the tokenizer, the data or a
weight is read. Before: a short layer_types list was a two-part traceback out of the tokenizer's load, a RoPE factor
of 0 made every loss nan, a negative one trained silently, a text factor or unknown rope_type was a TypeError or
KeyError inside the model's constructor. Settings and profiles: tests/fuzzing.py."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from fuzzing import fuzz
from hypothesis import example, given
from hypothesis import strategies as st
from transformers import AutoConfig, AutoModelForCausalLM

from steadytune.config import ModelArguments
from steadytune.errors import UserError
from steadytune.model.load import load_tokenizer
from steadytune.model.tiny import build_tokenizer, save_tiny_model

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=6), st.lists(st.integers(0, 3), max_size=2), st.just({}))
numbers = st.one_of(st.integers(-2, 8), st.floats(-2, 1e6), st.sampled_from([0, 0.5, 1, 1.0, 4.0, float("nan"),
                                                                             float("inf"), "4", True]))
rope_types = st.sampled_from(["default", "linear", "dynamic", "yarn", "llama3", "nosuch", 3, None])
rope = st.one_of(junk, st.fixed_dictionaries({"rope_type": rope_types}, optional={
    "factor": numbers, "rope_theta": numbers, "original_max_position_embeddings": st.sampled_from([16, 512]),
    "low_freq_factor": st.just(1.0), "high_freq_factor": st.just(4.0)}))
layer_kinds = st.sampled_from(["linear_attention", "full_attention", "sliding_attention", "nosuch", 1, None])
layer_types = st.one_of(junk, st.lists(layer_kinds, max_size=3), st.sampled_from([["linear_attention"] * 2,
                                                                                   ["full_attention"] * 2]))
windows = st.one_of(st.sampled_from([512, 16, 1]), junk)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tokenizer = build_tokenizer()
    root = tmp_path_factory.mktemp("configs")
    return {kind: save_tiny_model(root / kind, kind, tokenizer=tokenizer) for kind in ("qwen3_5", "qwen2")}


def _folder_with(base: Path, changes: dict, into: Path) -> Path:
    config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    into.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (into / name).write_bytes((base / name).read_bytes())
    (into / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return into


@fuzz(60)
@given(kind=st.sampled_from(["qwen3_5", "qwen2"]),
       changes=st.fixed_dictionaries({}, optional={"layer_types": layer_types, "rope_parameters": rope,
                                                   "max_position_embeddings": windows}))
@example(kind="qwen3_5", changes={"layer_types": ["linear_attention"]})
@example(kind="qwen2", changes={"rope_parameters": {"rope_type": "linear", "factor": 0, "rope_theta": 10000.0}})
@example(kind="qwen2", changes={"rope_parameters": {"rope_type": "linear", "factor": -2, "rope_theta": 10000.0}})
@example(kind="qwen2", changes={"rope_parameters": {"rope_type": "linear", "factor": "four"}})
@example(kind="qwen2", changes={"rope_parameters": {"rope_type": "nosuch", "factor": 2.0}})
@example(kind="qwen2", changes={"max_position_embeddings": 0})
def test_any_config_value_builds_a_finite_model_or_is_one_line_naming_config_json(folders, kind, changes):
    with tempfile.TemporaryDirectory() as scratch:
        folder = _folder_with(folders[kind], changes, Path(scratch) / "model")
        try:   # what train, eval, chat, export and serve read first
            load_tokenizer(ModelArguments(model_name_or_path=str(folder)))
        except UserError as e:
            message = str(e)
            assert message.startswith(f"model_name_or_path: {folder}/config.json: ") and "\n" not in message
            return
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
        with torch.no_grad():
            logits = model(torch.arange(4, 12)[None]).logits
        assert torch.isfinite(logits).all()


@pytest.mark.parametrize("model_type, keys", [
    ("phi3", {"rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48},
              "original_max_position_embeddings": 4096, "max_position_embeddings": 131072}),   # no factor: derived
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192}, "rope_theta": 500000.0}),   # Llama 3.1
    ("qwen2", {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),  # Qwen2.5
    ("gemma3_text", {"rope_scaling": {"rope_type": "linear", "factor": 8.0}}),   # one set per layer type
])
def test_released_models_rope_settings_pass(model_type, keys):
    from steadytune.model.config_values import config_problem

    assert config_problem(AutoConfig.for_model(model_type, **keys)) is None
