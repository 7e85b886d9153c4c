"""LoRA's scaling on the rank-r tensor before lora_B (model/lora_scaling.py): the same values as peft's order, peft's
own path wherever a variant or routing is in play, and one full-width gradient tensor less in the compiled backward."""

from __future__ import annotations

import re

import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import Linear as LoraLinear

from steadytune.model.lora_scaling import scale_before_lora_b
from steadytune.model.tiny import build_model


def lora_model(seed=0, dtype=torch.float32, **lora):
    model = build_model("qwen2", seed=seed).to(dtype)
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", **lora))
    for name, param in model.named_parameters():   # B starts at zero in peft: give it values so it counts
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    return model


def loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    logits.float().square().mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_with_the_default_scaling_of_two_the_bits_are_peft_s(dtype):
    """lora_alpha = 2 x rank (the default) -> scaling 2, a power of two: both orders round alike."""
    ids = torch.randint(0, 500, (2, 11))
    reference, changed = lora_model(dtype=dtype, lora_alpha=8), lora_model(dtype=dtype, lora_alpha=8)
    n, why = scale_before_lora_b(changed)
    assert n == sum(isinstance(m, LoraLinear) for m in changed.modules()) > 0 and f"({n} layers)" in why
    logits, grads = loss_and_grads(changed, ids)
    ref_logits, ref_grads = loss_and_grads(reference, ids)
    assert torch.equal(logits, ref_logits)
    assert grads.keys() == ref_grads.keys() and all(torch.equal(grads[k], ref_grads[k]) for k in grads)


def test_another_scaling_rounds_within_the_dtype():
    ids = torch.randint(0, 500, (2, 11))
    reference, changed = lora_model(lora_alpha=3), lora_model(lora_alpha=3)   # scaling 0.75
    scale_before_lora_b(changed)
    logits, grads = loss_and_grads(changed, ids)
    ref_logits, ref_grads = loss_and_grads(reference, ids)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    for k in grads:
        torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-4, atol=1e-7)


def test_disabled_merged_and_dora_layers_take_peft_s_own_path():
    ids = torch.randint(0, 500, (1, 9))
    model = lora_model(lora_alpha=8)
    scale_before_lora_b(model)
    base = build_model("qwen2", seed=0)
    with torch.no_grad(), model.disable_adapter():
        assert torch.equal(model(input_ids=ids).logits, base(input_ids=ids).logits)
    with torch.no_grad():
        before = model(input_ids=ids).logits
        model.merge_adapter()
        torch.testing.assert_close(model(input_ids=ids).logits, before, rtol=1e-4, atol=1e-5)
        model.unmerge_adapter()
    dora, dora_ref = lora_model(lora_alpha=8, use_dora=True), lora_model(lora_alpha=8, use_dora=True)
    scale_before_lora_b(dora)
    with torch.no_grad():
        assert torch.equal(dora(input_ids=ids).logits, dora_ref(input_ids=ids).logits)


def test_the_layer_peft_saves_and_merges_is_the_one_it_made():
    model = lora_model(lora_alpha=8)
    keys = set(model.state_dict())
    scale_before_lora_b(model)
    assert set(model.state_dict()) == keys
    assert all(type(m) is LoraLinear for m in model.modules() if "forward" in vars(m))
    assert scale_before_lora_b(model)[0] == 0   # applied once


def test_the_compiled_backward_writes_one_full_width_tensor_less():
    """Inductor's code for a LoRA layer followed by an elementwise op: peft's order has the kernel before lora_B's
    matmuls write the gradient twice at full width (as it is, and scaled); the scaled-first order writes it once."""
    from torch._inductor.utils import run_and_get_code

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 96, bias=False)

        def forward(self, x):
            return torch.nn.functional.silu(self.proj(x)) * 3

    def full_width_buffers(scaled_first: bool) -> int:
        torch.manual_seed(0)
        model = get_peft_model(Block(), LoraConfig(r=4, lora_alpha=8, target_modules=["proj"]))
        if scaled_first:
            scale_before_lora_b(model)
        compiled = torch.compile(model.base_model.model, backend="inductor")
        x = torch.randn(128, 64, requires_grad=True)
        _, codes = run_and_get_code(lambda: compiled(x).sum().backward())
        backward = codes[-1]
        return len(re.findall(r"empty_strided\w*\(\(128, 96\)", backward))

    torch._dynamo.reset()
    peft_order = full_width_buffers(False)
    torch._dynamo.reset()
    scaled_first = full_width_buffers(True)
    torch._dynamo.reset()
    assert scaled_first == peft_order - 1
