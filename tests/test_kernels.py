"""kernels.py: speed switches that must not change the numbers."""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model

from steadytune.data.collators import PadCollator
from steadytune.model.kernels import skip_lora_input_cast
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.training.loss import causal_lm_loss_sum


def _bf16_base_with_fp32_lora(seed: int = 0):
    model = build_model("qwen2", build_tokenizer(), seed=seed).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    return model


def _loss_and_grads(model, batch):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_sum, n = causal_lm_loss_sum(model, batch)
    (loss_sum / n).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return loss_sum.detach(), grads


def test_skipping_lora_input_cast_changes_no_value_forward_or_backward():
    torch.manual_seed(0)
    examples = [{"input_ids": torch.randint(5, 200, (n,)).tolist()} for n in (9, 14, 6)]
    for e in examples:
        e["labels"] = [-100] * 3 + e["input_ids"][3:]
    batch = PadCollator(pad_token_id=0)(examples)
    model = _bf16_base_with_fp32_lora()
    ref_loss, ref_grads = _loss_and_grads(model, batch)
    changed, _ = skip_lora_input_cast(model)
    assert changed == 7 * model.get_base_model().config.num_hidden_layers  # every LoRA'd projection
    loss, grads = _loss_and_grads(model, batch)
    assert torch.equal(loss, ref_loss)
    assert ref_grads.keys() == grads.keys() and all(torch.equal(grads[k], ref_grads[k]) for k in grads)
    # and the cast really is skipped: an fp32 input now reaches the fp32 adapter's matmul only via autocast
    layer = model.get_base_model().model.layers[0].self_attn.q_proj
    x = torch.randn(2, layer.in_features, dtype=torch.bfloat16)
    assert layer._cast_input_dtype(x, torch.float32).dtype == torch.bfloat16
