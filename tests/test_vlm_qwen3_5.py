"""Qwen3.5 (Qwen3-VL's vision tower before a hybrid Gated DeltaNet / attention language model): LLaMA-Factory's
qwen3_5 templates use Qwen3-VL's media plugin (LLaMA-Factory 0.9.5 data/template.py), and a v1 file names no template,
so `template: auto` takes the plugin from the model's type. Tiny random model from config, drawn images."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from steadytune.config import ConfigError, load_config
from steadytune.data.multimodal.encode import media_context
from steadytune.data.multimodal.plugins import plugin_for
from steadytune.data.multimodal.processor import load_media_processor
from steadytune.data.multimodal.rope import mrope_for_config
from steadytune.model.lora import attach_adapter
from steadytune.model.tiny_vlm import save_tiny_vlm
from steadytune.model.vision import vision_parts
from steadytune.training.loss import causal_lm_loss_sum
from vlm_batches import image_batch, square, tiny

ROWS = [(square((255, 0, 0)), "What colour?", "red"), (square((0, 0, 255), 64), "What colour is it?", "blue")]


@pytest.mark.parametrize("template", ["qwen3_5", "qwen3_5_nothink", "qwen3_6"])
def test_qwen3_5_templates_use_qwen3_vl_media_tokens(template):
    assert plugin_for(template) is plugin_for("qwen3_vl")


def test_loss_with_images_is_the_models_own_and_rope_matches():
    model, tokenizer = tiny("qwen3_5")
    batch = image_batch("qwen3_5", model, tokenizer, ROWS)
    with torch.no_grad():
        reference = model(**batch).loss
        loss_sum, n = causal_lm_loss_sum(model, batch)
    torch.testing.assert_close(loss_sum / n, reference, rtol=1e-5, atol=1e-5)
    rope = mrope_for_config(model.config)
    assert rope is not None and rope.frames_as_blocks
    for row in range(len(ROWS)):
        length = int(batch["attention_mask"][row].sum())
        ids = batch["input_ids"][row:row + 1, :length]
        types = batch["mm_token_type_ids"][row, :length].tolist()
        theirs, _ = model.model.get_rope_index(ids, mm_token_type_ids=torch.tensor([types]),
                                               image_grid_thw=batch["image_grid_thw"][row:row + 1])
        assert torch.equal(rope.positions(types, batch["image_grid_thw"][row:row + 1].tolist(), []), theirs[:, 0])


def test_lora_trains_the_hybrid_language_model_and_freezes_the_vision_side():
    model, tokenizer = tiny("qwen3_5")
    model = attach_adapter(model, load_config(None, {"model_name_or_path": "unused"}))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert any("linear_attn" in name for name in trainable) and any("self_attn" in name for name in trainable)
    parts = vision_parts(model)
    assert not [name for name in trainable if any(f in name for f in parts.vision_tower + parts.projector)]
    loss_sum, n = causal_lm_loss_sum(model, image_batch("qwen3_5", model, tokenizer, ROWS))
    loss_sum.backward()
    assert all(p.grad is not None for name, p in model.named_parameters() if p.requires_grad and "lora_A" in name)


def test_template_auto_takes_the_media_tokens_of_the_models_type(tmp_path):
    processor = load_media_processor(save_tiny_vlm(tmp_path / "qwen3_5", "qwen3_5"))
    assert processor.model_type == "qwen3_5"
    data = load_config(None, {"model_name_or_path": "unused", "template": "auto"}).data
    assert media_context(data, "empty", processor).plugin is plugin_for("qwen3_vl")   # auto resolved to empty
    named = SimpleNamespace(**{**vars(data), "template": "empty"})
    with pytest.raises(ConfigError, match="template: empty has no image/video support for model type qwen3_5"):
        media_context(named, "empty", processor)
