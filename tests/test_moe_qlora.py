"""QLoRA for a mixture of experts: the routed experts in 4 bits (model/moe/quantized.py) as they load and as a shape is
built, their grouped forward and LoRA gradients against the same weights dequantised (exact) and against the full
precision model (within NF4's error), a 4-bit MoE run end to end on bitsandbytes' CPU backend (adapter saved in peft's
format, loaded again, merged by export into the dequantised base); and the memory estimates of hardware/moe_shape.py
and hardware/memory.py against the parameters of real tiny models, against arithmetic for the Qwen3-30B-A3B shape, and
as doctor --config prints them."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from sample_data import ALPACA, sample_dir
from transformers import AutoConfig

from steadytune.config import load_config
from steadytune.hardware import moe_shape as moe
from steadytune.hardware.backend import GPU, HardwareInfo
from steadytune.hardware.memory import (
    activation_bytes_per_token,
    checkpointed_activation_gib,
    choose_activation_offloading,
    choose_gradient_checkpointing,
    held_gib,
    layer_activation_bytes,
    lora_parameters,
    weight_gib,
)
from steadytune.hardware.quantization import quantised_bytes_per_parameter, quantized_memory
from steadytune.model.moe.anatomy import ROUTED_EXPERTS, count_by_kind, expert_sites
from steadytune.model.tiny import MOE_KINDS, build_model

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None
needs_bnb = pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed (pip install 'steadytune[qlora]')")

# The shape of issue 52's target (the published Qwen3-30B-A3B config).
QWEN3_30B_A3B = dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                     head_dim=128, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                     intermediate_size=6144, vocab_size=151936, tie_word_embeddings=False)
# A tiny Qwen3-MoE whose widths are multiples of bitsandbytes' block of 64.
WIDE = dict(hidden_size=64, moe_intermediate_size=64, head_dim=16)
IDS = torch.tensor([[5, 17, 33, 60, 81, 99, 120, 7, 250, 3, 44, 61]])


# --- the estimates from a config ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", MOE_KINDS)
def test_parameters_by_kind_from_the_config_are_the_models(kind):
    """Every kind's count read from the config alone equals the count of the model transformers builds from it
    (shared experts, dense first layers, biases, latent attention, sinks included)."""
    model = build_model(kind)
    built = {k: c.total for k, c in count_by_kind(model).items() if c.total}
    estimated = {k: n for k, n in moe.parameters_by_kind(model.config, moe.moe_shape(model.config)).items() if n}
    assert estimated == built


@pytest.mark.parametrize("kind", ["qwen2_moe", "qwen3_5_moe", "qwen3_next"])
def test_lora_on_every_expert_is_counted_as_peft_makes_it(kind):
    """A shared expert and its gate (a router: no LoRA) beside the routed experts; Qwen3.5-MoE and Qwen3-Next also
    have gated DeltaNet layers (separate or fused input projections) and gated full attention."""
    model = build_model(kind)
    from steadytune.config import RunConfig
    from steadytune.model.lora import attach_adapter

    cfg = RunConfig()
    cfg.method.lora_rank = 4
    peft_model = attach_adapter(model, cfg)
    trained = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora_parameters(model.config, 4) == trained


def qwen3_30b():
    return AutoConfig.for_model("qwen3_moe", **QWEN3_30B_A3B)


def test_the_30b_a3b_shape_by_arithmetic():
    config = qwen3_30b()
    shape = moe.moe_shape(config)
    parts = moe.parameters_by_kind(config, shape)
    experts = 48 * 128 * 3 * 2048 * 768
    assert parts[moe.ROUTED_EXPERTS] == experts == 28_991_029_248
    assert parts[moe.ATTENTION] == 48 * (2048 * 4096 * 2 + 2048 * 512 * 2 + 2 * 128)
    assert parts[moe.DENSE_MLP] == 0    # intermediate_size (6144) is no layer's width in this model
    assert 3.3e9 < moe.active_parameters(config, shape) < 3.4e9    # "A3B"
    # weights: near 56.9 GiB in bf16; ~16 GiB with 4-bit experts and linear layers (double quantisation)
    assert weight_gib(config) == pytest.approx(56.87, abs=0.01)
    four = weight_gib(config, quantised_bytes_per_parameter(4, True))
    assert 15.0 < four < 16.0
    assert weight_gib(config, quantised_bytes_per_parameter(8, False)) > 55   # 8 bits: the experts stay bf16
    # LoRA r 8 on every expert: r x (in + out) per expert and projection, besides attention's
    assert lora_parameters(config, 8) == 8 * 48 * ((2048 + 4096) * 2 + (2048 + 512) * 2
                                                   + 128 * ((2048 + 1536) + (768 + 2048)))
    # activations: the top-8 experts' rows of each token, not a dense MLP of intermediate_size
    per_row = 2 * (2 * 2048 + 4 * 768) + 32
    assert layer_activation_bytes(config) == [24 * 2048 + 8 * per_row + 8 * 128] * 48
    assert activation_bytes_per_token(config) == 48 * (24 * 2048 + 8 * per_row + 8 * 128 + 6 * 128)


def test_a_24_gb_card_checkpoints_the_30b_a3b_qlora_run_and_offloads_only_at_rank_8():
    config = qwen3_30b()
    four = weight_gib(config, quantised_bytes_per_parameter(4, True))
    for rank, offloads in ((8, True), (4, False)):
        state = four + lora_parameters(config, rank) * 16 / 2**30 + 0.75
        on, why = choose_gradient_checkpointing(config, 2048, 24.0, state_gib=state)
        assert on and "would exceed" in why
        assert choose_activation_offloading(config, 2048, 24.0, True, state)[0] is offloads
    assert 0.4 < checkpointed_activation_gib(config, 2048) < 0.8 < checkpointed_activation_gib(config, 8192) < 3
    need, parts = quantized_memory(config, 2048, 4, True, 4, True)
    assert "one layer's experts dequantised 0.75" in parts and float(need.strip("~ GiB")) < 24


def test_doctor_config_estimates_a_mixture_of_experts(tmp_path):
    from steadytune.doctor.plan import train_plan_findings

    qwen3_30b().save_pretrained(tmp_path / "q30")
    info = HardwareInfo(backend="cuda", torch_version="2.13", gpus=[GPU(0, "NVIDIA GeForce RTX 4090", "sm_89", 23.5)])
    keys = {"model_name_or_path": str(tmp_path / "q30"), "cutoff_len": 2048}
    plain = train_plan_findings(info, "config", load_config(None, keys), offline=True)
    [shape] = [f for f in plain if "a mixture of experts" in f.what]
    assert "128 experts x 48 layers, 8 a token: 3.35 B of 30.53 B parameters active" in shape.what
    assert "weights 56.9 GiB in bf16" in shape.why and "321 M parameters, 4.8 GiB" in shape.why
    [need] = [f for f in plain if "the run needs" in f.what]
    assert "base weights 56.9" in need.why and "with quantization_bit: 4 and gradient checkpointing" in need.why
    quantised = train_plan_findings(info, "config", load_config(None, {**keys, "quantization_bit": 4}), offline=True)
    [need] = [f for f in quantised if "the run needs" in f.what]
    assert "4-bit nf4 base" in need.what and "base weights 15.5" in need.why and "experts dequantised" in need.why
    assert any("15.5 GiB with quantization_bit: 4" in f.why for f in quantised)


# --- 4-bit experts on bitsandbytes' CPU backend --------------------------------------------------------------

@pytest.fixture(scope="module")
def moe64(tmp_path_factory):
    from steadytune.model.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("moe_qlora") / "qwen3_moe", "qwen3_moe", **WIDE)


def load(folder, bits=None, **keys):
    from steadytune.config import ModelArguments
    from steadytune.model.load import load_model_and_tokenizer
    from steadytune.model.quantize import keep_training_layout

    model, _ = load_model_and_tokenizer(ModelArguments(model_name_or_path=str(folder), quantization_bit=bits, **keys),
                                        torch.float32, device=torch.device("cpu"))
    keep_training_layout(model)   # bitsandbytes' CPU inference layout has no backward (model/quantize.py)
    return model


@pytest.fixture(scope="module")
def loaded(moe64):
    """(the 4-bit model, the same 4-bit numbers dequantised into a plain model, the full-precision model)."""
    from steadytune.model.quantize import dequantize_base

    return load(moe64, 4), dequantize_base(load(moe64, 4), torch.float32), load(moe64)


@needs_bnb
def test_experts_load_in_four_bits_and_shrink(loaded):
    from steadytune.model.moe.quantized import FourBitWeight, four_bit_bytes, is_placeholder

    four, _, full = loaded
    sites = expert_sites(four)
    assert len(sites) == 2
    for site in sites:
        packed = {n: m for n, m in site.experts.named_children() if isinstance(m, FourBitWeight)}
        assert sorted(packed) == ["down_proj_4bit", "gate_up_proj_4bit"]
        assert packed["gate_up_proj_4bit"].shape == (4, 128, 64) and packed["gate_up_proj_4bit"].nested
        assert is_placeholder(site.experts.gate_up_proj) and not site.experts.gate_up_proj.requires_grad
        assert torch.isnan(site.experts.down_proj).all() and site.experts.down_proj.shape == (4, 64, 64)
    # counted by kind as every expert still, held as 4-bit numbers
    assert count_by_kind(four)[ROUTED_EXPERTS].total == count_by_kind(full)[ROUTED_EXPERTS].total == 2 * 4 * 3 * 64 * 64
    routed = count_by_kind(full)[ROUTED_EXPERTS].total
    code_tables = 4 * (16 + 256 + 1) * 4   # each weight's nf4 code, its nested 8-bit code and offset (fp32)
    expected = routed * quantised_bytes_per_parameter(4, True) + code_tables
    assert four_bit_bytes(four) == pytest.approx(expected, rel=0.02)
    # what the model holds: a placeholder adds one element, not its shape
    held = held_gib([*four.parameters(), *four.buffers()]) * 2**30
    assert held < 0.5 * held_gib(full.parameters()) * 2**30   # (the fp32 embeddings and head are most of the rest)
    estimate = weight_gib(four.config, quantised_bytes_per_parameter(4, True), base_bytes=4.0) * 2**30
    assert held == pytest.approx(estimate, rel=0.15)   # Linear4bit's scales are no buffer: held_gib misses them


@needs_bnb
def test_grouped_4bit_forward_is_the_dequantised_model_and_within_nf4_of_full_precision(loaded):
    four, dequantised, full = loaded
    with torch.no_grad():
        logits = four(input_ids=IDS).logits
        assert torch.isfinite(logits).all()
        # the same 4-bit numbers through transformers' own experts forward: equal to rounding
        assert torch.allclose(logits, dequantised(input_ids=IDS).logits, atol=1e-5, rtol=1e-5)
        # one experts module against the full-precision one, on the same rows and routing
        hidden = torch.randn(12, 64)
        index = torch.randint(0, 4, (12, 2))
        weights = torch.rand(12, 2)
        ours = four.model.layers[0].mlp.experts(hidden, index, weights)
        exact = full.model.layers[0].mlp.experts(hidden, index, weights)
    error = ((ours - exact).norm() / exact.norm()).item()
    assert 0.01 < error < 0.2, error   # NF4's error on Gaussian weights (~10%), not zero: the weights are 4-bit


@needs_bnb
def test_the_4bit_grouped_matmul_traces_whole_under_compile():
    """bitsandbytes' dequantisation is a registered op and the autograd function keeps no host state: Dynamo takes
    forward and backward in one graph (aot_eager here; a CUDA run long enough to compile its layers uses Inductor)."""
    from steadytune.model.moe.quantized import grouped_4bit, quantize_weight

    torch.manual_seed(0)
    packed = quantize_weight(torch.randn(4, 128, 64, dtype=torch.bfloat16), "nf4", True)
    ends = torch.tensor([10, 20, 30, 48], dtype=torch.int32)
    x = torch.randn(48, 64, dtype=torch.bfloat16, requires_grad=True)

    def product(rows):
        return grouped_4bit(rows, packed, False, ends, "torch")

    want = product(x)
    torch._dynamo.reset()
    try:
        got = torch.compile(product, backend="aot_eager", fullgraph=True)(x)
    finally:
        torch._dynamo.reset()
    assert torch.equal(got, want)
    probe = torch.randn_like(want)
    assert torch.equal(torch.autograd.grad(got, x, probe)[0], torch.autograd.grad(want, x, probe)[0])
    # and the product is x @ W[e]^T with W the dequantised weight (rows 0-9 expert 0, ...)
    w = packed.dequantize(torch.bfloat16)
    assert torch.allclose(want[10:20].float(), (x[10:20] @ w[1].T).float(), rtol=2e-2, atol=2e-2)


def lora_model(model, rank: int = 4):
    from steadytune.config import RunConfig
    from steadytune.model.lora import attach_adapter

    cfg = RunConfig()
    cfg.method.lora_rank = rank
    torch.manual_seed(0)
    model = attach_adapter(model, cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)   # non-zero B: the adapter changes the output
    return model


def expert_grads(model):
    loss = model(input_ids=IDS, labels=IDS).loss
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and "experts" in n}


@needs_bnb
def test_lora_gradients_on_4bit_experts(moe64):
    """The expert LoRA gradients of the 4-bit model equal those of the same numbers dequantised (peft's own forward
    on plain weights) to fp32 rounding, and point where the full-precision model's do; a disabled adapter runs the
    4-bit base; a second adapter at once is refused in one line."""
    from steadytune.errors import UserError
    from steadytune.model.quantize import dequantize_base

    four = lora_model(load(moe64, 4))
    plain = lora_model(dequantize_base(load(moe64, 4), torch.float32))
    full = lora_model(load(moe64))
    got, want = expert_grads(four), expert_grads(plain)
    assert sorted(got) == sorted(want) and len(got) == 8   # A and B of both projections, two layers
    for name in got:
        assert got[name].abs().sum() > 0, name
        assert torch.allclose(got[name], want[name], rtol=1e-4, atol=1e-6), name
    # one layer's experts, the same rows, routing and adapter: the 4-bit base's LoRA gradients within NF4's error
    torch.manual_seed(2)
    hidden, index, weights = torch.randn(24, 64), torch.randint(0, 4, (24, 2)), torch.rand(24, 2)
    probe = torch.randn(24, 64)
    grads = []
    for model in (four, full):
        model.zero_grad(set_to_none=True)
        experts = model.base_model.model.model.layers[0].mlp.experts
        (experts(hidden, index, weights) * probe).sum().backward()
        grads.append({n: p.grad for n, p in experts.named_parameters() if p.grad is not None})
    assert len(grads[0]) == 4
    for name, grad in grads[0].items():
        exact = grads[1][name]
        error = ((grad - exact).norm() / exact.norm()).item()
        assert 0.02 < error < 0.2, (name, error)
    with torch.no_grad():
        with four.disable_adapter():
            base = four(input_ids=IDS).logits
        assert torch.allclose(base, load(moe64, 4)(input_ids=IDS).logits, atol=1e-5)
        assert not torch.allclose(base, four(input_ids=IDS).logits, atol=1e-4)
    from peft import LoraConfig
    four.add_adapter("second", LoraConfig(r=2, target_parameters=["experts.gate_up_proj", "experts.down_proj"]))
    four.base_model.set_adapter(["default", "second"])
    with pytest.raises(UserError, match="one plain adapter at a time"), torch.no_grad():
        four(input_ids=IDS)


@needs_bnb
def test_checkpointing_and_activation_offloading_compose_with_4bit_experts(moe64):
    """Recomputed layers dequantise the experts again and give the same LoRA gradients; with the layers' inputs
    offloaded (model/offload.py; on a CPU a copy in the same memory, the same hooks) too, and the 4-bit buffers stay."""
    from steadytune.model.moe.quantized import FourBitWeight
    from steadytune.model.offload import HostOffload

    grads, hooks = [], None
    for checkpointing, offloading in ((False, False), (True, False), (True, True)):
        model = lora_model(load(moe64, 4)).train()
        if checkpointing:
            model.get_base_model().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.get_base_model().enable_input_require_grads()
        if offloading:
            hooks = HostOffload(model, torch.device("cpu"), min_bytes=1)   # the tiny model's tensors are small
            hooks.attach(model)
        grads.append(expert_grads(model))
    for got in grads[1:]:
        for name, want in grads[0].items():
            assert torch.allclose(got[name], want, rtol=1e-5, atol=1e-7), name
    assert hooks.bytes_offloaded >= 2 * IDS.numel() * 64 * 4   # at least both layers' inputs (fp32 here)
    packed = [m.packed for m in model.modules() if isinstance(m, FourBitWeight)]
    assert len(packed) == 4 and all(p.untyped_storage().data_ptr() in hooks.kept for p in packed)


def overrides(model, out, **extra) -> dict:
    keys = {"model_name_or_path": str(model), "dataset": ALPACA, "dataset_dir": str(sample_dir()), "template": "qwen",
            "cutoff_len": 64, "max_samples": 32, "output_dir": str(out), "per_device_train_batch_size": 4,
            "max_steps": 4, "lora_rank": 4, "learning_rate": 5e-3, "logging_steps": 1, "seed": 3,
            "quantization_bit": 4}
    keys.update(extra)
    return keys


@needs_bnb
def test_a_4bit_moe_run_trains_saves_loads_and_merges(moe64, tmp_path, capsys):
    from safetensors import safe_open

    from steadytune.infer.export import export_merged
    from steadytune.infer.loading import load_run, open_run
    from steadytune.train import run_training

    run_dir = tmp_path / "run"
    result = run_training(load_config(None, overrides(moe64, run_dir)), progress=False)
    assert result.losses[-1] < result.losses[0]
    printed = capsys.readouterr().out
    assert "4 fused expert weights in bitsandbytes' 4-bit format" in printed
    assert "higher_precision embeddings" in printed and "experts (" not in printed.split("higher_precision")[1][:200]
    # peft's standard adapter: per-expert pairs side by side, shapes from the placeholder's
    with safe_open(str(run_dir / "adapter_model.safetensors"), "pt") as f:
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    assert all("lora_" in k for k in shapes)
    experts = {k: v for k, v in shapes.items() if ".layers.0.mlp.experts." in k}
    assert len(experts) == 4   # A and B of gate_up_proj and down_proj: [experts x r, in] and [out, r x experts]
    assert sorted(v for k, v in experts.items() if "lora_A" in k) == [[4 * 4, 64]] * 2
    assert sorted(v for k, v in experts.items() if "lora_B" in k) == [[64, 4 * 4], [2 * 64, 4 * 4]]
    config = json.loads((run_dir / "adapter_config.json").read_text(encoding="utf-8"))
    assert sorted(config["target_parameters"]) == ["experts.down_proj", "experts.gate_up_proj"]
    trained = result.model.eval()
    with torch.no_grad():
        trained_logits = trained(input_ids=IDS).logits
    # loaded again for inference: the 4-bit base again, the adapter on it, the same numbers
    model, _ = load_run(open_run(str(run_dir)), device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    from steadytune.model.quantize import keep_training_layout
    keep_training_layout(model)
    with torch.no_grad():
        assert torch.allclose(model(input_ids=IDS).logits, trained_logits, atol=1e-5)
    # export merges into the dequantised base (experts included): the trained model within fp32 rounding
    out = tmp_path / "merged"
    export_merged(open_run(str(run_dir)), out, verify=False)
    merged, _ = load_run(open_run(str(out)), device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=IDS).logits, trained_logits, atol=2e-4, rtol=1e-4)


@needs_bnb
def test_a_shape_built_in_four_bits_is_the_loaded_model(moe64, loaded, tmp_path):
    """benchmarks/moe_qlora_peak.py builds the 30B-A3B shape module by module straight into 4 bits: the same modules,
    parameters and buffers as a 4-bit load, and it trains through run_training (the script, in this process)."""
    from conftest import load_benchmark

    from steadytune.model.moe.quantized_load import build_four_bit_model

    four, _, _ = loaded
    built = build_four_bit_model(four.config, torch.device("cpu"), torch.float32)
    assert {n: tuple(p.shape) for n, p in built.named_parameters()} == \
        {n: tuple(p.shape) for n, p in four.named_parameters()}
    assert sorted(n for n, _ in built.named_buffers()) == sorted(n for n, _ in four.named_buffers())
    assert torch.equal(built.model.rotary_emb.inv_freq, four.model.rotary_emb.inv_freq)

    bench = load_benchmark("moe_qlora_peak")
    model_dir = bench.make_model_folder("tiny-moe", tmp_path / "model")
    row = bench.run_one("tiny-moe", model_dir, tmp_path, rank=4, tokens=64, steps=3, device="cpu")
    assert row["steps"] == 3 and row["tokens_per_s"] > 0 and row["estimate"].startswith("~")
    assert row["policy_for_24gib"]["gradient_checkpointing"] is False   # a tiny model fits a 24 GB card as it is
    assert "4" in bench.table([row]) and bench.parse_runs("8:2048,4:64") == [(8, 2048), (4, 64)]
