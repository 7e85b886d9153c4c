"""The training step on a vision-language model: pixels reach the model, the loss is the model's own, the vision
encoder runs once per micro-batch, only what should train gets gradients."""

from __future__ import annotations

import pytest
import torch

from steadytune.config import load_config
from steadytune.model.lora import attach_adapter
from steadytune.model.tiny_vlm import TINY_VLM_KINDS
from steadytune.model.vision import vision_parts
from steadytune.training.loss import causal_lm_loss_sum
from vlm_batches import image_batch, square, tiny

ROWS = [(square((255, 0, 0)), "What colour?", "red"), (square((0, 0, 255), 40), "What colour is it?", "blue")]


def count_calls(module: torch.nn.Module) -> list:
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


def vision_root(model, kind):
    body = model.get_base_model().model if hasattr(model, "get_base_model") else model.model
    return body.visual if kind.startswith("qwen") else body.vision_tower


@pytest.mark.parametrize("kind", TINY_VLM_KINDS)
def test_loss_is_the_models_own_with_images(kind):
    model, tokenizer = tiny(kind)
    batch = image_batch(kind, model, tokenizer, ROWS)
    model.train()
    with torch.no_grad():
        reference = model(**{k: v for k, v in batch.items()}).loss
        loss_sum, n = causal_lm_loss_sum(model, batch)
    assert n == int((batch["labels"][:, 1:] != -100).sum())
    torch.testing.assert_close(loss_sum / n, reference, rtol=1e-5, atol=1e-5)
    # the image matters: the same text with another image gives another loss
    other = image_batch(kind, model, tokenizer, [(square((0, 255, 0)), p, a) for _, p, a in ROWS])
    with torch.no_grad():
        assert not torch.allclose(causal_lm_loss_sum(model, other)[0], loss_sum)


@pytest.mark.parametrize("kind", TINY_VLM_KINDS)
def test_lora_step_trains_the_language_model_and_encodes_images_once(kind):
    model, tokenizer = tiny(kind)
    model = attach_adapter(model, load_config(None, {"model_name_or_path": "unused"}))
    for name, param in model.named_parameters():   # non-zero B: the adapters change the output
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.02)
    batch = image_batch(kind, model, tokenizer, ROWS)
    calls = count_calls(vision_root(model, kind))
    model.train()
    loss_sum, n = causal_lm_loss_sum(model, batch)
    (loss_sum / n).backward()
    assert len(calls) == 1, "the vision encoder ran more than once for one micro-batch"
    grads = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert any(float(g.abs().sum()) > 0 for name, g in grads.items() if "lora_A" in name)
    parts = vision_parts(model)
    frozen = [n for n, p in model.named_parameters() if any(f in n for f in parts.vision_tower + parts.projector)]
    assert frozen and all(not dict(model.named_parameters())[n].requires_grad for n in frozen)


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma3_vl"])
def test_unfrozen_projector_gets_gradients_through_the_encoder(kind):
    model, tokenizer = tiny(kind)
    cfg = load_config(None, {"model_name_or_path": "unused", "freeze_multi_modal_projector": False})
    model = attach_adapter(model, cfg)
    batch = image_batch(kind, model, tokenizer, ROWS)
    loss_sum, n = causal_lm_loss_sum(model, batch)
    loss_sum.backward()
    projector = [p for name, p in model.named_parameters() if "modules_to_save" in name and p.requires_grad]
    assert projector and all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in projector)


@pytest.mark.parametrize("kind", ["qwen3_vl", "gemma3_vl"])
def test_text_only_rows_skip_the_vision_tower(kind):
    """A batch without pixels goes through the language model alone (Gemma 3 needs no token_type_ids then)."""
    model, tokenizer = tiny(kind)
    ids = tokenizer("hello there, the quick brown fox", add_special_tokens=False)["input_ids"]
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
             "labels": torch.tensor([ids])}
    calls = count_calls(vision_root(model, kind))
    model.eval()
    with torch.no_grad():
        loss_sum, n = causal_lm_loss_sum(model, batch)
        reference = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          labels=batch["labels"]).loss
    assert not calls
    torch.testing.assert_close(loss_sum / n, reference, rtol=1e-5, atol=1e-5)
