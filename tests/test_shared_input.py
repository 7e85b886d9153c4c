"""LoRA layers that read the same input, multiplied as one group (model/shared_input.py): peft's values and
gradients, the same parameters and files, peft's own path wherever the group cannot serve, the fp8 copies merged
without growing, and one compiled graph for every layer."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from steadytune.model.fp8_base import restore_base, use_fp8_base
from steadytune.model.fp8_matmul import Fp8FrozenLinear
from steadytune.model.kernels import decoder_layers
from steadytune.model.lora_scaling import scale_before_lora_b
from steadytune.model.shared_input import GROUP_ATTR, merge_bases, share_inputs, shared_input_blocker, sibling_groups
from steadytune.model.tiny import build_model
from test_lora_scaling import loss_and_grads


def lora_model(kind="qwen2", seed=0, fp8=False, **lora):
    model = build_model(kind, seed=seed)
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", **lora))
    for name, param in model.named_parameters():   # B starts at zero in peft: give it values so it counts
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    scale_before_lora_b(model)   # as train does, before the groups
    if fp8:
        use_fp8_base(model)
    return model


IDS = torch.randint(0, 500, (2, 13), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "gemma3", "llama"])
def test_the_group_gives_peft_s_values_and_gradients(kind):
    reference, grouped = lora_model(kind), lora_model(kind)
    groups, why = share_inputs(grouped)
    assert groups == 2 * 2 and "4 groups" in why   # q/k/v and gate/up in each of the 2 layers
    logits, grads = loss_and_grads(grouped, IDS)
    ref_logits, ref_grads = loss_and_grads(reference, IDS)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys() and any("k_proj.lora_A" in k for k in grads)
    for key in grads:
        torch.testing.assert_close(grads[key], ref_grads[key], rtol=1e-4, atol=1e-7)


def test_only_narrow_members_put_their_bases_side_by_side():
    """k/v under grouped-query attention are narrower than their input: q/k/v bases run as one matmul; gate/up, each
    wider than its input, run apart (measured faster so); qwen3's 128-wide heads make every member wide."""
    groups = sibling_groups(lora_model("qwen2"))
    assert [merge_bases(g) for g in groups] == [True, False, True, False]
    assert not any(merge_bases(g) for g in sibling_groups(lora_model("qwen3")))


def test_parameters_and_saved_keys_stay_as_peft_made_them():
    for fp8 in (False, True):
        model = lora_model(fp8=fp8)
        keys, params = set(model.state_dict()), [id(p) for p in model.parameters()]
        share_inputs(model)
        assert set(model.state_dict()) == keys and [id(p) for p in model.parameters()] == params


def test_disabled_merged_and_dropout_layers_take_peft_s_path():
    model, reference = lora_model(), lora_model()
    share_inputs(model)
    base = build_model("qwen2", seed=0)
    with torch.no_grad():
        with model.disable_adapter():   # the group serves the bases alone (a DPO reference pass)
            torch.testing.assert_close(model(input_ids=IDS).logits, base(input_ids=IDS).logits, rtol=1e-5, atol=1e-6)
        want = reference(input_ids=IDS).logits
        model.merge_adapter()
        torch.testing.assert_close(model(input_ids=IDS).logits, want, rtol=1e-4, atol=1e-5)
        model.unmerge_adapter()
        torch.testing.assert_close(model(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-6)
    dropped, dropped_ref = lora_model(lora_dropout=0.1), lora_model(lora_dropout=0.1)
    share_inputs(dropped)
    for m in (dropped, dropped_ref):
        m.train()
    torch.manual_seed(5)
    got = dropped(input_ids=IDS).logits
    torch.manual_seed(5)
    assert torch.equal(got, dropped_ref(input_ids=IDS).logits)   # each layer drew its own mask, as peft does


def test_a_member_called_on_another_input_runs_alone():
    model, reference = lora_model(), lora_model()
    share_inputs(model)
    attention = decoder_layers(model)[0].self_attn
    ref_attention = decoder_layers(reference)[0].self_attn
    x, other = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    with torch.no_grad():
        q = attention.q_proj(x)   # the leader computes q, k and v for x
        assert len(getattr(attention.q_proj, GROUP_ATTR).pending) == 2
        torch.testing.assert_close(attention.k_proj(other), ref_attention.k_proj(other))
        torch.testing.assert_close(attention.v_proj(x), ref_attention.v_proj(x))
        torch.testing.assert_close(q, ref_attention.q_proj(x))


def test_fp8_copies_are_merged_without_growing_and_restore_gives_the_bf16_path():
    model, reference, exact = lora_model(fp8=True), lora_model(fp8=True), lora_model()
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    groups, why = share_inputs(model)
    assert "2 over one fp8 copy" in why   # q/k/v of each layer; gate/up stay apart
    assert sum(b.numel() * b.element_size() for b in model.buffers()) <= buffers * 1.01
    got, got_grads = loss_and_grads(model, IDS)
    ref, ref_grads = loss_and_grads(reference, IDS)
    want, want_grads = loss_and_grads(exact, IDS)
    # one scale per row across q, k and v for the incoming gradient: within fp8's own rounding of the exact values
    assert (got - want).abs().max() <= 1.5 * (ref - want).abs().max() + 1e-6
    for key in want_grads:
        err, ref_err = (got_grads[key] - want_grads[key]).norm(), (ref_grads[key] - want_grads[key]).norm()
        assert err <= 1.5 * ref_err + 1e-3 * want_grads[key].norm(), key
    assert restore_base(model) == 2 * 7
    assert not any(isinstance(m, Fp8FrozenLinear) for m in model.modules())   # the group's copies went with them
    torch.testing.assert_close(loss_and_grads(model, IDS)[0], want, rtol=1e-5, atol=1e-6)


def _compiled_run(model) -> tuple[int, torch.Tensor, dict]:
    """-> (graphs Dynamo traced over two steps of every layer, the logits, the gradients)."""
    counted = []

    def counting_backend(gm, example_inputs):
        counted.append(gm)
        return gm.forward

    torch._dynamo.reset()
    for layer in decoder_layers(model):
        layer.compile(backend=counting_backend, fullgraph=True)   # fullgraph: no break at the stash
    logits, grads = loss_and_grads(model, IDS)
    loss_and_grads(model, IDS)
    torch._dynamo.reset()
    return len(counted), logits, grads


def test_the_compiled_layers_trace_the_group_without_more_graphs():
    """The group's stash is traced away: no graph break, and no graph more than without groups (there, the first
    layer's input, which needs no gradient, makes a second)."""
    model = lora_model()
    share_inputs(model)
    graphs, logits, grads = _compiled_run(model)
    ref_graphs, ref_logits, ref_grads = _compiled_run(lora_model())
    assert graphs == ref_graphs <= 2, (graphs, ref_graphs)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    for key in grads:
        torch.testing.assert_close(grads[key], ref_grads[key], rtol=1e-4, atol=1e-7)


def test_what_rules_the_groups_out():
    assert shared_input_blocker("lora", False, 0.0) is None
    assert "finetuning_type full" in shared_input_blocker("full", False, 0.0)
    assert "DoRA" in shared_input_blocker("lora", True, 0.0)
    assert "lora_dropout 0.05" in shared_input_blocker("lora", False, 0.05)
    assert "deepspeed" in shared_input_blocker("lora", False, 0.0, "deepspeed")
