"""activation_offloading (model/offload.py): the checkpointed layers' inputs leave the device during the forward,
come back for the backward, and the gradients are the same; weights never move; the config keys, the LF key
use_unsloth_gc, the memory estimate and the refusals.

On a CPU the "host copy" is a copy in the same memory (HostOffload without a CUDA stream): the hooks, the order of
the copies back, what is moved and what is freed are the same code; the H200 rows in docs/speed.md measure the rest.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from peft import LoraConfig, get_peft_model

from steadytune.config import ConfigError, load_config
from steadytune.errors import UserError
from steadytune.hardware.memory import (ACTIVATION_SHARE, MEMORY_SHARE, checkpointed_activation_gib,
                                         choose_activation_offloading, run_memory_gib)
from steadytune.model import kernels
from steadytune.model.anatomy import decoder_layers
from steadytune.model.offload import HostOffload, offloading_blocker, remove_offloading
from steadytune.model.tiny import build_model

LAYERS = 3


def checkpointed_lora_model(compiled: bool):
    torch.manual_seed(0)
    model = get_peft_model(build_model("qwen2", num_hidden_layers=LAYERS),
                           LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    model.get_base_model().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.get_base_model().enable_input_require_grads()
    if compiled:
        kernels.compile_layers(model, static_shapes=True, recompute_pointwise=True)
    return model.train()


def watch_layer_inputs(model) -> list:
    """Weak references to each decoder layer's input, taken outside the (possibly compiled) layer call."""
    seen: list = []
    for layer in decoder_layers(model):
        inner = layer._compiled_call_impl or layer._call_impl

        def call(*args, _inner=inner, **kwargs):
            seen.append(weakref.ref(args[0] if args else kwargs["hidden_states"]))
            return _inner(*args, **kwargs)
        layer._compiled_call_impl = call
    return seen


def one_step(model, ids, seen: list) -> tuple[float, dict, int]:
    """-> (loss, gradients, layer inputs still alive between forward and backward)."""
    model.zero_grad()
    seen.clear()
    loss = model(input_ids=ids, labels=ids).loss
    gc.collect()
    alive = sum(ref() is not None for ref in seen)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, alive


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_offloaded_layer_inputs_leave_during_forward_and_the_gradients_stay_exact(monkeypatch, compiled):
    # AOTAutograd without Inductor: the compiled layers save their inputs as a compiled function does on a GPU
    monkeypatch.setattr(kernels, "COMPILE_BACKEND", torch._dynamo.lookup_backend("aot_eager"))
    torch._dynamo.reset()
    ids = torch.randint(0, 500, (2, 40))
    try:
        plain = checkpointed_lora_model(compiled)
        seen = watch_layer_inputs(plain)
        want = [one_step(plain, ids, seen) for _ in range(2)]
        model = checkpointed_lora_model(compiled)
        seen = watch_layer_inputs(model)
        offload = HostOffload(model, torch.device("cpu"), min_bytes=1)   # the tiny model's tensors are small
        offload.attach(model)
        got = [one_step(model, ids, seen) for _ in range(2)]   # a second micro-batch starts a fresh record list
    finally:
        torch._dynamo.reset()
    for (want_loss, want_grads, want_alive), (got_loss, got_grads, got_alive) in zip(want, got):
        assert got_loss == want_loss
        assert want_grads.keys() == got_grads.keys() and len(got_grads) == 7 * 2 * LAYERS
        for name in want_grads:
            assert torch.equal(got_grads[name], want_grads[name]), name
        # checkpointing alone keeps every layer's input for backward; offloaded, only the first layer's input (the
        # embedding's output, which the model's forward still holds) is on the device
        assert want_alive == LAYERS and got_alive <= 1, (want_alive, got_alive)
    hidden = model.config.hidden_size
    assert offload.bytes_offloaded >= LAYERS * ids.numel() * hidden * 4   # at least the layer inputs (fp32 here)
    assert all(ref() is None for ref in offload.records)   # the backward freed every host copy


def test_weights_and_small_tensors_stay_where_they_are():
    model = checkpointed_lora_model(compiled=False)
    offload = HostOffload(model, torch.device("cpu"), min_bytes=64)
    weight = model.get_base_model().model.layers[0].mlp.up_proj.base_layer.weight
    assert offload.pack(weight) is weight
    view = weight[:2]   # a view of a weight: the same storage
    assert offload.pack(view) is view
    small = torch.ones(4)
    assert offload.pack(small) is small
    strided = torch.ones(64, 64).t()   # a copy back would have other strides than the compiled backward expects
    assert offload.pack(strided) is strided
    big = torch.randn(64, 64)
    packed = offload.pack(big)
    assert packed is not big and offload.pack(big) is packed   # saved twice (rotary tables): copied once
    assert torch.equal(offload.unpack(packed), big)


def test_remove_offloading_takes_the_hooks_off():
    from steadytune.model.offload import offload_activations

    model = checkpointed_lora_model(compiled=False)
    offload = offload_activations(model, torch.device("cpu"))
    ids = torch.randint(0, 500, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    assert remove_offloading(model) == pytest.approx(offload.bytes_offloaded / 2**30)
    assert offload.bytes_offloaded == 0   # 16 tokens of the tiny model: nothing reaches 1 MiB
    assert remove_offloading(model) is None


def test_offloading_says_why_it_cannot_run():
    assert "already host memory" in offloading_blocker(torch.device("cpu"), True, None)
    assert "gradient_checkpointing is false" in offloading_blocker(torch.device("cuda", 0), False, None)
    assert "DeepSpeed" in offloading_blocker(torch.device("cuda", 0), True, "DeepSpeed")
    assert offloading_blocker(torch.device("cuda", 0), True, None) is None


def test_offloading_is_on_by_default_only_where_checkpointing_alone_would_not_fit():
    from steadytune.doctor.plan import _shape_config

    config, tokens, state = _shape_config("qwen2.5-7b"), 16384, 5.8   # QLoRA 7B's weights
    kept = checkpointed_activation_gib(config, tokens, compiled=True)
    moved = checkpointed_activation_gib(config, tokens, compiled=True, offloaded=True)
    assert kept - moved == pytest.approx(ACTIVATION_SHARE[True] * 28 * 3584 * 2 * tokens / 2**30)
    tight = (state + (kept + moved) / 2) / MEMORY_SHARE   # fits offloaded, not without
    on, why = choose_activation_offloading(config, tokens, tight, True, state, compiled=True)
    assert on and why.startswith("on: with checkpointing") and why.endswith("it fits")
    on, why = choose_activation_offloading(config, tokens, 80, True, state, compiled=True)
    assert not on and "fit in 85% of the 80 GiB budget" in why and "activation_offloading: true would keep" in why
    on, why = choose_activation_offloading(config, tokens, 6, True, state, compiled=True)
    assert on and why.endswith("it comes closer")   # fits neither way: the smaller footprint is the better bet
    on, why = choose_activation_offloading(config, tokens, tight, True, state, compiled=True, blocker="it is FSDP")
    assert not on and why.endswith("but it is FSDP")
    assert choose_activation_offloading(config, tokens, tight, False, state)[0] is False   # nothing to move
    assert choose_activation_offloading(config, tokens, 80, True, state, requested=True) == (
        True, "activation_offloading: true was asked for")


def test_offloading_lowers_the_checkpointed_estimate_by_the_layer_inputs():
    config = build_model("qwen2").config
    config.num_hidden_layers, config.hidden_size = 28, 3584   # the 7B shape's inputs: 28 x 3,584 x 2 bytes a token
    config.intermediate_size, config.num_attention_heads, config.num_key_value_heads = 18944, 28, 4
    kept, parts = run_memory_gib(config, 16384, 16, checkpointing=True, compiled=True)
    moved, moved_parts = run_memory_gib(config, 16384, 16, checkpointing=True, compiled=True, offloaded=True)
    inputs = 28 * 3584 * 2 * 16384 / 2**30   # 3.1 GiB, weighed as the estimate weighs activations
    assert kept - moved == pytest.approx(ACTIVATION_SHARE[True] * inputs / MEMORY_SHARE), (kept, moved)
    assert "host memory" in moved_parts and "host memory" not in parts
    assert run_memory_gib(config, 16384, 16, False, offloaded=True) == run_memory_gib(config, 16384, 16, False)


def test_config_keys_and_the_llamafactory_key():
    cfg = load_config(None, ["use_unsloth_gc=true"])
    assert cfg.train.activation_offloading is True
    cfg = load_config(None, ["use_unsloth_gc=true", "disable_gradient_checkpointing=true"])
    assert not cfg.train.activation_offloading   # LLaMA-Factory's Unsloth checkpointing needs checkpointing
    assert load_config(None, ["activation_offloading=true"]).train.activation_offloading is True
    with pytest.raises(ConfigError, match="activation_offloading: true moves what gradient checkpointing keeps"):
        load_config(None, ["activation_offloading=true", "gradient_checkpointing=false"])
    with pytest.raises(ConfigError, match="use_unsloth_gc: true .* activation_offloading: false disagree"):
        load_config(None, ["use_unsloth_gc=true", "activation_offloading=false"])


def test_train_on_a_cpu_refuses_offloading_and_names_the_key(tmp_path):
    from test_train_packing import overrides, train

    from steadytune.model.tiny import save_tiny_model

    model = save_tiny_model(tmp_path / "qwen2", "qwen2")
    with pytest.raises(UserError, match="activation_offloading: true, but the model is on the CPU"):
        train(overrides(model, tmp_path / "run", activation_offloading="true", max_steps=1))


def test_offloading_leaves_the_cuda_graphs_on():
    # its copies go to buffers kept for the run and rejoin the compute stream, so a graph can record them
    from steadytune.training.speed_plan import graph_blockers

    cfg = load_config(None, ["activation_offloading=true"])
    assert graph_blockers(cfg, fsdp=False) == graph_blockers(load_config(None, []), fsdp=False)


def test_each_saved_position_reuses_one_kept_host_buffer():
    """A recorded CUDA graph replays its copies into the host memory it recorded them with: the n-th tensor saved in
    every micro-batch goes to the same buffer, and a buffer a recording used is never freed, even when a larger one
    replaces it (one no recording used is)."""
    model = checkpointed_lora_model(compiled=False)
    offload = HostOffload(model, torch.device("cpu"), min_bytes=64)

    def micro_batch(*tensors):
        packed = [offload.pack(t) for t in tensors]
        pointers = [p.host.data_ptr() for p in packed]
        for p, t in zip(reversed(packed), reversed(tensors)):   # backward order
            assert torch.equal(offload.unpack(p), t)
        return pointers

    first = micro_batch(torch.randn(32, 32), torch.randn(32, 32))
    again = micro_batch(torch.randn(32, 32), torch.randn(32, 32))
    assert again == first and len(set(first)) == 2
    outgrown = offload.host_buffers[0]
    offload.recorded = {0}   # as a CUDA graph recording of that micro-batch leaves it (only a GPU can record)
    bigger = micro_batch(torch.randn(64, 32), torch.randn(16, 32))
    assert bigger[1] == first[1] and bigger[0] != first[0]   # the smaller one fits in the kept buffer
    assert [b is outgrown for b in offload.outgrown] == [True]   # the recorded one stays allocated
    micro_batch(torch.randn(16, 32), torch.randn(64, 32))   # buffer 1 outgrown, never recorded: let go
    assert len(offload.outgrown) == 1

    # a forward whose records are still alive (no backward yet) when the next micro-batch starts: own buffers
    alive = offload.pack(torch.randn(32, 32))
    offload.backward_started = True
    other = offload.pack(torch.randn(32, 32))
    assert other.host.data_ptr() != alive.host.data_ptr()


def test_doctor_config_counts_the_layer_inputs_in_host_memory(tmp_path):
    from steadytune.doctor.plan import quantization_findings
    from steadytune.hardware.backend import HardwareInfo

    path = tmp_path / "q.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nquantization_bit: 4\ncutoff_len: 16384\n"
                    "per_device_train_batch_size: 1\n", encoding="utf-8")
    gpu = HardwareInfo(backend="cuda", torch_version="2.11")

    def needs(cfg) -> tuple[float, str]:
        [memory] = [f for f in quantization_findings(gpu, cfg, "config", offline=True) if "the run needs" in f.what]
        return float(memory.what.split("needs ~")[1].split(" GiB")[0]), memory.why

    plain_need, plain_why = needs(load_config(path, ["gradient_checkpointing=true"]))
    assert "with activation_offloading: true ~" in plain_why
    moved_need, moved_why = needs(load_config(path, ["activation_offloading=true"]))
    assert moved_need < plain_need - 2 and "layer inputs in host memory" in moved_why
