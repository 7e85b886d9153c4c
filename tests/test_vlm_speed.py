"""The speed plan on a vision-language model: compile, fp8 base, fused SwiGLU and shared-input groups reach the language
model's decoder layers only; what rules static shapes or CUDA graphs out is said (tests/test_vlm_static.py: the
static path itself); the memory policy reads the language model's sizes (text_config)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from steadytune.config import load_config
from steadytune.hardware.memory import choose_gradient_checkpointing
from steadytune.model.anatomy import decoder_layers, text_config
from steadytune.model.fp8_base import eligible_layers, fp8_support, restore_base, use_fp8_base
from steadytune.model.fused_swiglu import fusable_mlps
from steadytune.model.kernels import compile_layers, uncompile_layers
from steadytune.model.lora import attach_adapter
from steadytune.model.shared_input import sibling_groups
from steadytune.training.lora_budget import adapter_parameters
from steadytune.training.loss import causal_lm_loss_sum
from steadytune.training.vision_speed import decide_vision_speed, plan_vision
from vlm_batches import image_batch, square, tiny

ROWS = [(square((255, 0, 0)), "What colour?", "red")]


def lora_vlm(kind: str, **keys):
    model, tokenizer = tiny(kind)
    cfg = load_config(None, {"model_name_or_path": "unused", **keys})
    return attach_adapter(model, cfg), tokenizer, cfg


def in_language_model(module, model) -> bool:
    names = {id(m): n for n, m in model.named_modules()}
    return ".language_model." in names[id(module)]


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma3_vl", "llava"])
def test_speed_pieces_find_only_the_language_models_layers(kind):
    # the vision tower unfrozen: it has LoRA layers too, which must be left alone
    model, _, _ = lora_vlm(kind, freeze_vision_tower=False)
    vision_lora = [n for n, m in model.named_modules() if hasattr(m, "lora_A") and ".language_model." not in n]
    assert vision_lora, "the test needs LoRA layers in the vision tower"
    layers = eligible_layers(model)
    assert layers and all(in_language_model(module, model) for module, _ in layers)
    groups = sibling_groups(model)
    assert groups and all(in_language_model(m, model) for group in groups for m in group)
    assert all(in_language_model(mlp, model) for mlp in fusable_mlps(model))
    layers = decoder_layers(model)
    assert layers is model.get_base_model().model.language_model.layers


def test_compile_reaches_the_language_model_layers_only():
    model, tokenizer, _ = lora_vlm("qwen2_5_vl")
    compiled, why = compile_layers(model, static_shapes=False)
    try:
        assert compiled and "2 decoder layers" in why
        compiled_modules = [n for n, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
        assert compiled_modules and all(".language_model.layers." in n for n in compiled_modules)
    finally:
        uncompile_layers(model)


@pytest.mark.skipif(not fp8_support(torch.device("cpu"))[0], reason="this torch has no fp8 matmul")
def test_fp8_base_over_a_vlm_still_sees_the_image():
    model, tokenizer, _ = lora_vlm("qwen2_5_vl")
    batch = image_batch("qwen2_5_vl", model, tokenizer, ROWS)
    with torch.no_grad():
        before = causal_lm_loss_sum(model, batch)[0]
    changed, _ = use_fp8_base(model)
    try:
        assert changed == 14   # 7 LoRA layers in each of the 2 language model layers
        with torch.no_grad():
            after = causal_lm_loss_sum(model, batch)[0]
        assert abs(float(after - before)) / float(before) < 0.05
    finally:
        restore_base(model)


class Batches:
    """What plan_vision reads of training/batches.TrainBatches: the collator and the rows."""

    def __init__(self, collate, rows=()):
        self.collate = collate
        self.data = type("Data", (), {"train": list(rows)})()
        self.prefetch, self.pin = 0, False


def test_what_rules_static_shapes_and_graphs_out_is_said_and_one_line_says_what_applies():
    from steadytune.data.multimodal.collate import MultimodalCollator

    model, _, cfg = lora_vlm("gemma3_vl")
    padded = plan_vision(model, Batches(MultimodalCollator(None, 0)), "cuda")
    assert padded.static_ok[0] is False and "packing: false" in padded.static_ok[1]
    assert padded.graph_blockers == {}
    decide_vision_speed(cfg, model, padded)
    reason = cfg.decisions["vision_speed"]["reason"]
    assert "2 decoder layers" in reason and "without autograd" in reason and "ahead in a thread" in reason
    assert "vision_tower 0 of" in cfg.decisions["trainable_parts"]["value"]
    trains, _, _ = lora_vlm("qwen2_5_vl", freeze_multi_modal_projector=False)
    plan = plan_vision(trains, Batches(MultimodalCollator(None, 0)), "cpu")
    assert "trains" in plan.graph_blockers["vision"]
    assert "one SDPA call per image and window" in plan.tower[0]   # no varlen kernel on a CPU
    from steadytune.model.tiny import build_model

    assert plan_vision(build_model("qwen2"), Batches(None), "cuda") is None


def test_memory_estimates_read_the_language_models_sizes():
    model, _, _ = lora_vlm("qwen3_vl")
    config = text_config(model)
    use, why = choose_gradient_checkpointing(config, 4096, 80.0, None)
    assert isinstance(use, bool) and why
    # the LoRA budget counts the adapters LoRA will make: the language model's 14 linear layers, rank 8
    fresh, _ = tiny("qwen3_vl")
    linears = [m for n, m in fresh.named_modules() if isinstance(m, torch.nn.Linear) and ".language_model.layers." in n]
    assert adapter_parameters(fresh, "all", 8) == sum(8 * (m.in_features + m.out_features) for m in linears)


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed")
@pytest.mark.parametrize("kind", ["qwen2_5_vl", "llava"])
def test_qlora_quantises_the_language_model_only(kind, tmp_path):
    """quantization_bit: 4 on a VLM, loaded as a run loads it: the language model's linear layers in 4 bits, the
    vision tower and projector as loaded; a batch with an image still trains."""
    from steadytune.model.load import load_model_and_tokenizer
    from steadytune.model.quantize import quantized_linear_names, skip_narrow_repacking
    from steadytune.model.tiny_vlm import save_tiny_vlm

    folder = save_tiny_vlm(tmp_path / kind, kind)
    cfg = load_config(None, {"model_name_or_path": str(folder), "quantization_bit": 4})
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch.float32, device=torch.device("cpu"))
    quantized = quantized_linear_names(model)
    assert len(quantized) == 14 and all(".language_model.layers." in n for n in quantized)
    plain = [n for n, m in model.named_modules() if type(m) is torch.nn.Linear]
    assert any("visual" in n or "vision_tower" in n for n in plain)
    model = attach_adapter(model, cfg)
    skip_narrow_repacking(model)
    batch = image_batch(kind, model, tokenizer, ROWS)
    loss_sum, n = causal_lm_loss_sum(model, batch)
    loss_sum.backward()
    assert torch.isfinite(loss_sum) and any(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_a_mixture_of_experts_vlm_adapts_its_experts_and_counts_them():
    """Qwen3-VL-MoE: the MoE code reads the language model's text_config (experts, top-k), LoRA reaches the routed
    experts as for a text MoE, the budget counts what is made, and a batch with an image trains."""
    from steadytune.hardware.moe_shape import moe_shape
    from steadytune.model.lora import count_parameters

    fresh, tokenizer = tiny("qwen3_vl_moe")
    shape = moe_shape(text_config(fresh))
    assert shape is not None and (shape.experts, shape.top_k) == (4, 2)
    budget = adapter_parameters(fresh, "all", 8)
    model, tokenizer, cfg = lora_vlm("qwen3_vl_moe")
    assert count_parameters(model)[0] == budget
    adapted = {n.split(".lora_")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert any(".mlp.experts" in n for n in adapted) and all(".language_model." in n for n in adapted)
    loss_sum, n = causal_lm_loss_sum(model, image_batch("qwen3_vl_moe", model, tokenizer, ROWS))
    loss_sum.backward()
    assert torch.isfinite(loss_sum)


@pytest.mark.parametrize("shape, total, vision", [("qwen2.5-vl-3b", 3.755, 0.669), ("qwen3-vl-4b", 4.438, 0.415),
                                                   ("gemma-3-4b", 4.300, 0.417)])
def test_the_benchmark_shapes_have_the_published_sizes(shape, total, vision):
    """benchmarks/vlm_speed.py's shapes, built on the meta device: the published models' parameter counts (3.75 B,
    4.44 B, 4.3 B), the vision tower's among them."""
    from conftest import load_benchmark
    from transformers import AutoConfig, AutoModelForImageTextToText

    spec = load_benchmark("vlm_speed").SHAPES[shape]
    config = AutoConfig.for_model(spec["model_type"], text_config=spec["text_config"],
                                  vision_config=spec["vision_config"], tie_word_embeddings=True,
                                  **spec.get("config", {}))
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    count = sum(p.numel() for p in model.parameters()) / 1e9
    tower = sum(p.numel() for n, p in model.named_parameters() if ".visual." in n or ".vision_tower." in n) / 1e9
    assert count == pytest.approx(total, abs=0.005) and tower == pytest.approx(vision, abs=0.005)


def test_the_benchmark_rows_have_their_images(tmp_path):
    """benchmarks/vlm_speed.py's dataset holds the asked rows with drawn images of the asked size."""
    import json

    from conftest import load_benchmark
    from PIL import Image

    folder = load_benchmark("vlm_speed").make_dataset(tmp_path / "data", rows=7, image_size=64, fixtures=False)
    rows = json.loads((folder / "vlm_bench.json").read_text())
    assert len(rows) == 7   # one <image> placeholder per image of each row, as LLaMA-Factory's mllm_demo has them
    assert all(sum(m["content"].count("<image>") for m in r["messages"]) == len(r["images"]) for r in rows)
    for name in {i for r in rows for i in r["images"]}:
        assert Image.open(folder / name).size == (64, 64)
    assert "vlm_bench" in json.loads((folder / "dataset_info.json").read_text())


def test_doctor_plans_a_vlm_run_from_its_language_models_sizes(tmp_path):
    """doctor --config on a vision-language model's folder: checkpointing, fp8 and QLoRA memory from the language
    model's config (text_config), said so, instead of failing on the nested config."""
    from steadytune.config import RunConfig
    from steadytune.doctor.plan import model_config_for, train_plan_findings
    from steadytune.hardware.backend import GPU, HardwareInfo
    from steadytune.model.tiny_vlm import save_tiny_vlm

    folder = save_tiny_vlm(tmp_path / "vlm", "qwen2_5_vl")
    cfg = RunConfig()
    cfg.model.model_name_or_path = str(folder)
    config, label = model_config_for(cfg)
    assert config.hidden_size == 32 and "vision tower and projector are not counted" in label
    cfg.model.quantization_bit = 4
    info = HardwareInfo(backend="cuda", torch_version=torch.__version__, gpus=[GPU(0, "GPU", "sm_90", 139.8)])
    findings = train_plan_findings(info, "plan", cfg)
    assert findings and all(f.what for f in findings)


@pytest.mark.parametrize("shape", ["qwen2.5-vl-3b", "qwen3-vl-4b", "gemma-3-4b"])
def test_the_benchmark_model_folders_load_and_prepare_rows_as_train_does(shape, tmp_path, monkeypatch):
    """make_model's folder for each shape (its widths shrunk here: the layout is what is tested) loads through the
    loaders `train` uses, its processor makes the family's image tokens, and a prepared row trains a step."""
    from conftest import load_benchmark

    from steadytune.data.prepare import prepare_datasets
    from steadytune.model.load import load_model_and_tokenizer, load_tokenizer
    from steadytune.training.vision_data import load_vision_processor, prepare_with_media

    bench = load_benchmark("vlm_speed")
    spec = bench.SHAPES[shape]
    small = {**spec, "text_config": {**spec["text_config"], "hidden_size": 64, "intermediate_size": 128,
                                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                     "head_dim": 16, "vocab_size": 1024}}
    vision = dict(spec["vision_config"])
    for key, value in (("depth", 1), ("num_hidden_layers", 1), ("hidden_size", 64), ("intermediate_size", 128),
                       ("num_heads", 2), ("num_attention_heads", 2), ("out_hidden_size", 64),
                       ("deepstack_visual_indexes", [0]), ("fullatt_block_indexes", [0])):
        if key in vision:
            vision[key] = value
    small["vision_config"] = vision
    if shape.startswith("qwen"):   # the rope split must fit the small head (16: 8 frequencies)
        small["text_config"]["rope_parameters"] = {**spec["text_config"]["rope_parameters"],
                                                   "mrope_section": [2, 3, 3]}
    monkeypatch.setitem(bench.SHAPES, shape, small)
    folder = bench.make_model(tmp_path / "model", shape)
    data_dir = bench.make_dataset(tmp_path / "data", rows=3, image_size=64, fixtures=False)
    keys = bench.train_keys({"model_dir": str(folder), "data_dir": str(data_dir), "image_size": 64, "batch": 2,
                             "warmup": 1, "steps": 1, "device": "cpu", "shape": shape})
    cfg = load_config(None, {**keys, "output_dir": str(tmp_path / "out")})
    tokenizer = load_tokenizer(cfg.model)
    data = prepare_with_media(prepare_datasets, cfg, tokenizer, load_vision_processor(cfg, tokenizer))
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch_dtype=torch.float32, tokenizer=tokenizer)
    image_id = model.config.image_token_id
    per_image = {"qwen2.5-vl-3b": 4, "qwen3-vl-4b": 4, "gemma-3-4b": 256}[shape]   # 64 px: 2x2 merged; Gemma: 256
    example = data.train[0]
    assert sum(1 for t in example["input_ids"] if t == image_id) == per_image * len(example["images"])
    from steadytune.data.multimodal.collate import MultimodalCollator
    from steadytune.data.multimodal.rope import mrope_for_config

    batch = MultimodalCollator(data.media, tokenizer.pad_token_id, rope=mrope_for_config(model.config))([example])
    loss, n = causal_lm_loss_sum(model, batch)
    assert n > 0 and torch.isfinite(loss)
