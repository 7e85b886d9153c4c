"""Vision-language models: recognised from their config, loaded whole, and trained where LLaMA-Factory 0.9.5 trains them.

tests/golden/lf_vlm_trainable.json holds, for each tiny VLM of steadytune/model/tiny_vlm.py and each freezing case,
the parameters LLaMA-Factory itself left trainable (tools/make_lf_vlm_golden.py ran its load_model); the same keys
here must train the same parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from steadytune.config import ConfigError, load_config
from steadytune.model.anatomy import decoder_layers, text_config
from steadytune.model.lora import attach_adapter, resolve_lora_targets
from steadytune.model.tiny_vlm import TINY_VLM_KINDS, build_vlm, save_tiny_vlm
from steadytune.model.vision import (
    describe_trainable,
    is_vision_config,
    is_vision_folder,
    is_vision_model,
    trainable_by_part,
    unquantised_vision_modules,
)

GOLDEN = json.loads((Path(__file__).parent / "golden" / "lf_vlm_trainable.json").read_text(encoding="utf-8"))


def config_for(**keys):
    return load_config(None, {"model_name_or_path": "unused", **keys})


def trainable_names(model) -> set[str]:
    return {n.removeprefix("base_model.model.") for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("kind", TINY_VLM_KINDS)
@pytest.mark.parametrize("case", sorted(GOLDEN["cases"]))
def test_trainable_parameters_are_llamafactorys(kind, case):
    model = build_vlm(kind)
    cfg = config_for(**GOLDEN["cases"][case])
    ours = trainable_names(attach_adapter(model, cfg))
    theirs = set(GOLDEN["trainable"][kind][case])
    if case == "lora_projector":
        # the one recorded difference: LLaMA-Factory's LoRA leaves the projector frozen under lora_target: all; here
        # freeze_multi_modal_projector: false trains it in full, saved with the adapter (modules_to_save)
        extra = ours - theirs
        assert extra and all(".modules_to_save.default." in n for n in extra)
        assert {n.replace(".modules_to_save.default", "") for n in extra} == {
            n for n, _ in build_vlm(kind).named_parameters() if trainable_by_part_name(kind, n) == "projector"}
        ours -= extra
    assert ours == theirs, f"only here: {sorted(ours - theirs)[:6]}; only in LLaMA-Factory: {sorted(theirs - ours)[:6]}"


def trainable_by_part_name(kind: str, name: str) -> str:
    from steadytune.model.vision import part_of, vision_parts

    return part_of(name, vision_parts(build_vlm(kind)))


def test_golden_names_exist_in_these_models():
    """The golden was made with LLaMA-Factory's transformers (5.6): the module names must still be these."""
    for kind in TINY_VLM_KINDS:
        names = {n for n, _ in build_vlm(kind).named_parameters()}
        full = set(GOLDEN["trainable"][kind]["full_all"])
        assert full == names, kind


@pytest.mark.parametrize("kind", TINY_VLM_KINDS)
def test_recognised_from_config_and_folder(kind, tmp_path):
    model = build_vlm(kind)
    assert is_vision_config(model.config) and is_vision_model(model)
    folder = save_tiny_vlm(tmp_path / kind, kind)
    assert is_vision_folder(folder)
    from steadytune.model.load import load_image_processor

    # its image processor loads from the folder (transformers' Pillow backend: no torchvision here)
    assert load_image_processor(load_config(None, {"model_name_or_path": str(folder)}).model) is not None
    # a few hundred thousand parameters, the vision tower tiny too
    parts = trainable_by_part(model)
    assert sum(total for _, total in parts.values()) < 400_000
    assert 0 < parts["vision_tower"][1] < 100_000
    # the language model's sizes live in text_config; the layers are the language model's
    assert text_config(model).hidden_size == 32
    assert len(decoder_layers(model)) == text_config(model).num_hidden_layers == 2


def test_text_models_are_not_vision_models():
    from steadytune.model.tiny import build_model

    model = build_model("gemma3")
    assert not is_vision_model(model)
    assert unquantised_vision_modules(model.config) == []


def test_lora_defaults_adapt_the_language_model_only():
    model = attach_adapter(build_vlm("qwen2_5_vl"), config_for())
    adapted = {n.split(".lora_")[0] for n in trainable_names(model)}
    assert adapted and all(".language_model.layers." in n for n in adapted)
    line = describe_trainable(model)
    assert "vision_tower 0 of" in line and "projector 0 of" in line


@pytest.mark.parametrize("kind", TINY_VLM_KINDS)
def test_a_projector_trained_in_full_reads_all_of_it_trainable(kind):
    """freeze_multi_modal_projector: false with LoRA trains the whole projector (peft's modules_to_save); the start-up
    line said half of it ("projector 24,800 of 49,600"), counting peft's frozen copy of the original (issue 67)."""
    model = attach_adapter(build_vlm(kind), config_for(freeze_multi_modal_projector=False))
    trainable, total = trainable_by_part(model)["projector"]
    projector = sum(p.numel() for n, p in build_vlm(kind).named_parameters()
                    if trainable_by_part_name(kind, n) == "projector")
    assert trainable == total == projector > 0
    assert f"projector {projector:,} of {projector:,} trainable" in describe_trainable(model)


def test_a_lora_target_that_is_no_linear_layer_is_refused():
    with pytest.raises(ConfigError, match="no linear layer named 'nope'"):
        resolve_lora_targets(build_vlm("llava"), "nope")


def test_everything_frozen_is_refused():
    cfg = config_for(freeze_language_model=True)
    with pytest.raises(ConfigError, match="no linear layer of this vision-language model is left"):
        attach_adapter(build_vlm("gemma3_vl"), cfg)


def test_qlora_leaves_the_vision_tower_and_projector_unquantised():
    """The skip patterns as transformers' bitsandbytes quantizer reads them (a regex from the start of the name)."""
    from transformers.quantizers.quantizers_utils import should_convert_module

    for kind in TINY_VLM_KINDS:
        model = build_vlm(kind)
        skip = ["lm_head", *unquantised_vision_modules(model.config)]
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            part = trainable_by_part_name(kind, name + ".weight")
            converted = should_convert_module(name, skip)
            assert converted == (part == "language_model" and name != "lm_head"), (kind, name)
