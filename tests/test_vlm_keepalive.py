"""The vision keep-alive (training/vision_keepalive.py): when image-free batches must still run the vision tower,
and that the zero-weight blank-image term runs it (so every rank joins its collectives) without changing the loss."""

from __future__ import annotations

import pytest
import torch

from steadytune.config import load_config
from steadytune.data.multimodal.encode import MediaContext
from steadytune.data.multimodal.plugins import plugin_for
from steadytune.model.lora import attach_adapter
from steadytune.model.tiny_vlm import tiny_image_processor
from steadytune.data.multimodal.processor import MediaProcessor
from steadytune.training.loss import causal_lm_loss_sum
from steadytune.training.vision_keepalive import VisionKeepAlive, blank_image_inputs, keepalive_reason
from vlm_batches import tiny

TEMPLATE = {"qwen2_5_vl": "qwen2_vl", "gemma3_vl": "gemma3"}


def lora(kind, **keys):
    model, tokenizer = tiny(kind)
    return attach_adapter(model, load_config(None, {"model_name_or_path": "unused", **keys})), tokenizer


def test_the_decision():
    frozen, _ = lora("qwen2_5_vl")
    assert keepalive_reason(frozen, world_size=1, params_sharded=True) is None      # one process: nothing to wait on
    assert keepalive_reason(frozen, world_size=2, params_sharded=False) is None     # DDP, frozen tower: no collective
    assert "sharded" in keepalive_reason(frozen, world_size=2, params_sharded=True)
    trainable, _ = lora("qwen2_5_vl", freeze_multi_modal_projector=False)
    assert "train" in keepalive_reason(trainable, world_size=2, params_sharded=False)
    text = torch.nn.Linear(2, 2)
    text.config = {"model_type": "qwen2"}
    assert keepalive_reason(text, world_size=8, params_sharded=True) is None


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma3_vl"])
def test_blank_image_runs_the_tower_and_changes_nothing(kind):
    model, tokenizer = lora(kind, freeze_multi_modal_projector=False)
    processor = MediaProcessor(tokenizer, tiny_image_processor(kind), image_seq_length=4,
                               boi_token="<start_of_image>", eoi_token="<end_of_image>", soft_token="<image_soft_token>")
    keep = VisionKeepAlive(model, blank_image_inputs(MediaContext(plugin_for(TEMPLATE[kind]), processor)))
    base = model.get_base_model()
    tower = base.model.visual if kind.startswith("qwen") else base.model.vision_tower
    calls = []
    tower.register_forward_hook(lambda *_: calls.append(1))
    ids = tokenizer("hello there, the quick brown fox", add_special_tokens=False)["input_ids"]
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
             "labels": torch.tensor([ids])}
    loss, n = causal_lm_loss_sum(model, batch)
    assert not calls                      # the step alone skips the tower on a batch without pixels
    total = loss + keep(batch, loss)
    assert calls and float(total) == float(loss)
    total.backward()
    projector = [p for name, p in model.named_parameters() if p.requires_grad and "modules_to_save" in name]
    assert projector and all(p.grad is not None and float(p.grad.abs().sum()) == 0 for p in projector)
    calls.clear()
    assert float(keep({**batch, "pixel_values": torch.zeros(1)}, loss)) == 0 and not calls   # images: not needed
