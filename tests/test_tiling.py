"""Sequence tiling (model/tiling.py): a decoder layer, the final norm and the loss a tile of tokens at a time give the
model's own loss and gradients (single rows, packed rows, padded rows; Qwen2, Qwen3 and Llama layers), keep only each
layer's input for backward, work under activation offloading with a host limit, and are chosen by the memory plan
(training/long_context.py) with the reasons in decisions. The GPU side (flash varlen kernels, 1M tokens) is
benchmarks/gpu_longctx.sh's."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from steadytune.config import load_config
from steadytune.errors import UserError
from steadytune.hardware.attention_kernels import tile_attention_reference
from steadytune.model import tiling
from steadytune.model.offload import HostOffload
from steadytune.model.tiny import build_model
from steadytune.training.loss import causal_lm_loss_sum


def lora_model(kind: str = "qwen2", layers: int = 2, dropout: float = 0.0):
    torch.manual_seed(0)
    model = build_model(kind, num_hidden_layers=layers)
    return get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False,
                                            lora_dropout=dropout)).train()


def loss_and_grads(model, batch) -> tuple[float, int, dict]:
    model.zero_grad()
    loss, n = causal_lm_loss_sum(model, batch)
    loss.backward()
    return loss.item(), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def assert_same(want, got, tol=1e-4):
    assert got[1] == want[1] and got[0] == pytest.approx(want[0], rel=1e-5)
    assert got[2].keys() == want[2].keys() and want[2]
    for name, grad in want[2].items():
        assert torch.allclose(got[2][name], grad, rtol=tol, atol=tol * grad.abs().max()), name


def batches(vocab: int = 500) -> dict:
    torch.manual_seed(1)
    ids = torch.randint(5, vocab, (1, 45))
    labels = ids.clone()
    labels[0, :6] = -100
    packed = torch.cat([torch.arange(17), torch.arange(9), torch.arange(19)])[None]
    two = torch.randint(5, vocab, (2, 30))
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[1, 21:] = 0
    two_labels = two.masked_fill(mask == 0, -100)
    return {"one row": {"input_ids": ids, "labels": labels},
            "packed row": {"input_ids": ids, "labels": labels, "position_ids": packed},
            "padded rows": {"input_ids": two, "labels": two_labels, "attention_mask": mask}}


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama"])
@pytest.mark.parametrize("layout", ["one row", "packed row", "padded rows"])
def test_tiled_layers_give_the_models_loss_and_gradients(kind, layout):
    model = lora_model(kind)
    batch = batches()[layout]
    want = loss_and_grads(model, batch)
    tiling.attach_tiling(model, tile=7)
    try:
        got = loss_and_grads(model, batch)
    finally:
        assert tiling.remove_tiling(model)
    assert_same(want, got)
    assert_same(want, loss_and_grads(model, batch))   # removed: the model's own forward again


def test_the_backward_splits_key_value_heads_into_groups_with_the_same_gradients(monkeypatch):
    model = lora_model()
    batch = batches()["packed row"]
    want = loss_and_grads(model, batch)
    monkeypatch.setattr(tiling, "KV_GRAD_EXPANSION_BYTES", 1)   # one key/value head a kernel call
    tiling.attach_tiling(model, tile=8)
    calls = []
    kernel = tiling.tiling_of(model).kernel
    tiling.tiling_of(model).kernel = lambda q, k, v, *a: calls.append(k.shape[1]) or kernel(q, k, v, *a)
    got = loss_and_grads(model, batch)
    tiling.remove_tiling(model)
    assert_same(want, got)
    assert set(calls) == {2, 1}   # the forward reads both heads at once, the backward one at a time


def test_short_micro_batches_and_evaluation_run_the_models_own_forward():
    model = lora_model()
    batch = batches()["one row"]
    t = tiling.attach_tiling(model, tile=8, min_tokens=64)
    assert not t.takes(batch)
    with torch.no_grad():   # and a tiled run without autograd (evaluation of a long row) gives the same loss
        plain = causal_lm_loss_sum(model, batch)[0]
        t.min_tokens = 0
        tiled = causal_lm_loss_sum(model, batch)[0]
    tiling.remove_tiling(model)
    assert tiled.item() == pytest.approx(plain.item(), rel=1e-5)


def saved_bytes(model, batch) -> int:
    """Bytes autograd keeps between forward and backward inside the decoder stack (weights excluded)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    total = [0]

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            total[0] += t.numel() * t.element_size()
        return t

    body = model.get_base_model().model
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = body(input_ids=batch["input_ids"]).last_hidden_state if tiling.tiling_of(model) is None else None
        if out is None:
            t = tiling.tiling_of(model)
            inputs = {"input_ids": batch["input_ids"]}
            with t.running(inputs):
                out = body(**t.body_inputs(inputs)).last_hidden_state
    out.sum().backward()
    return total[0]


def test_a_tiled_layer_keeps_only_its_input_and_the_rotary_tables():
    model = lora_model(layers=3)
    ids = torch.randint(5, 500, (1, 96))
    plain = saved_bytes(model, {"input_ids": ids})
    tiling.attach_tiling(model, tile=16)
    tiled = saved_bytes(model, {"input_ids": ids})
    tiling.remove_tiling(model)
    hidden, head_dim = 32, 8
    inputs = 3 * 96 * hidden * 4
    rotary = 3 * 2 * 96 * head_dim * 4   # each layer saves the (shared) cos and sin
    assert tiled == inputs + rotary
    assert plain > 5 * tiled


def test_offloading_with_a_host_limit_moves_the_lowest_layers_inputs_and_keeps_the_gradients():
    model = lora_model(layers=3)
    batch = batches()["packed row"]
    want = loss_and_grads(model, batch)
    tiling.attach_tiling(model, tile=8)
    layer_input = 45 * 32 * 4
    offload = HostOffload(model, torch.device("cpu"), min_bytes=1, max_bytes=layer_input + 2 * 45 * 8 * 4)
    offload.attach(model)
    try:
        got = loss_and_grads(model, batch)
        first = offload.bytes_offloaded
        again = loss_and_grads(model, batch)   # a second micro-batch: the limit applies afresh
    finally:
        offload.detach()
        tiling.remove_tiling(model)
    assert_same(want, got)
    assert_same(want, again)
    assert first == offload.bytes_offloaded == layer_input + 2 * 45 * 8 * 4   # layer 0's input, cos and sin


def test_tile_segments_cut_a_tile_of_queries_by_example():
    docs = [(0, 10), (10, 14), (14, 30)]
    assert tiling.tile_segments(docs, 0, 8) == (0, [0, 8], [0, 8])
    # queries 8..9 of the first example (keys from 0), the whole second, 2 of the third
    assert tiling.tile_segments(docs, 8, 16) == (0, [0, 2, 6, 8], [0, 10, 14, 16])
    assert tiling.tile_segments(docs, 16, 24) == (14, [0, 8], [0, 10])


def test_the_reference_tile_kernel_is_the_last_rows_of_causal_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(20, 4, 8), torch.randn(20, 2, 8), torch.randn(20, 2, 8)
    full = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True).transpose(0, 1)
    tile = tile_attention_reference(q[12:], k, v, [0, 8], [0, 20], 8 ** -0.5)
    assert torch.allclose(tile, full[12:], atol=1e-6)


def test_examples_come_from_cu_seq_lens_position_ids_or_the_padding():
    ids = torch.zeros(1, 12, dtype=torch.long)
    assert tiling.examples_of({"input_ids": ids, "cu_seq_lens_q": torch.tensor([0, 5, 12, 12])}) == [[(0, 5), (5, 12)]]
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 1, 2]])
    assert tiling.examples_of({"input_ids": ids, "position_ids": positions}) == [[(0, 3), (3, 5), (5, 9), (9, 12)]]
    mask = torch.tensor([[1] * 12, [1] * 7 + [0] * 5])
    assert tiling.examples_of({"input_ids": ids.expand(2, -1), "attention_mask": mask}) == [[(0, 12)], [(0, 7), (7, 12)]]


def test_what_cannot_be_tiled_says_why():
    assert "mixture of experts" in tiling.tiling_blocker(build_model("qwen3_moe"))
    assert "gemma3_text" in tiling.tiling_blocker(build_model("gemma3"))
    assert "lora_dropout" in tiling.tiling_blocker(lora_model(dropout=0.1), lora_dropout=0.1)
    assert tiling.tiling_blocker(lora_model()) is None


def test_train_with_sequence_tiling_matches_the_untiled_run(tmp_path, monkeypatch):
    from sample_data import ALPACA, sample_dir

    from steadytune.model.tiny import save_tiny_model
    from steadytune.train import run_training

    model = save_tiny_model(tmp_path / "model", "qwen2")

    def run(out, **extra):
        keys = {"model_name_or_path": model, "dataset": ALPACA, "dataset_dir": sample_dir(), "template": "qwen",
                "cutoff_len": 64, "max_samples": 16, "output_dir": out, "per_device_train_batch_size": 4,
                "learning_rate": 5e-3, "max_steps": 3, "logging_steps": 1, "lora_rank": 4, "seed": 7,
                "sequence_tile_tokens": 128, **extra}
        cfg = load_config(None, [f"{k}={v}" for k, v in keys.items()])
        return cfg, run_training(cfg, progress=False)

    _, plain = run(tmp_path / "plain", sequence_tiling=False)
    tiled_layers = []
    forward = tiling._LayerRun.forward
    monkeypatch.setattr(tiling._LayerRun, "forward", lambda self, *a: tiled_layers.append(1) or forward(self, *a))
    cfg, tiled = run(tmp_path / "tiled", sequence_tiling=True)
    assert tiled.losses == pytest.approx(plain.losses, rel=1e-4)
    assert len(tiled_layers) >= 3 * 2   # every step's micro-batch went through both layers tiled
    assert cfg.decisions["sequence_tiling"]["value"] is True
    assert cfg.decisions["gradient_checkpointing"]["value"] is False
    assert "keep only their input" in cfg.decisions["gradient_checkpointing"]["reason"]


def test_sequence_tiling_asked_where_it_cannot_run_names_the_key(tmp_path):
    from steadytune.training.long_context import decide_tiling

    cfg = load_config(None, ["sequence_tiling=true", "lora_dropout=0.1"])
    with pytest.raises(UserError, match="sequence_tiling: true, but lora_dropout"):
        decide_tiling(cfg, lora_model(dropout=0.1), 4096, 80.0, 10.0, fsdp=False)
    auto = load_config(None, ["lora_dropout=0.1"])
    on, why = decide_tiling(auto, lora_model(dropout=0.1), 4096, 80.0, 10.0, fsdp=False)
    assert not on and "lora_dropout" in why


def test_examples_past_the_models_window_are_said_at_start(capsys):
    from steadytune.training.long_context import check_window

    cfg = load_config(None, ["cutoff_len=4096"])
    config = build_model("qwen2").config   # 512 positions
    check_window(cfg, config, 300)
    assert "context_window" not in cfg.decisions
    check_window(cfg, config, 700)
    assert cfg.decisions["context_window"]["value"] == 512
    assert "700 tokens, past the model's window of 512" in capsys.readouterr().err


def test_the_window_counts_the_rope_scaling_of_the_models_own_config(capsys):
    """Hostile round 5 (issue 67): a model whose config.json sets YaRN x4 (transformers applies it) was told its
    examples past max_position_embeddings train 'at positions the model never saw (rope_scaling is not supported)'."""
    from steadytune.training.long_context import check_window

    cfg = load_config(None, ["cutoff_len=4096"])
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, "rope_theta": 10000.0}
    config = build_model("qwen2", rope_parameters=yarn).config   # 512 positions x 4
    check_window(cfg, config, 2000)
    assert "context_window" not in cfg.decisions and capsys.readouterr().err == ""
    check_window(cfg, config, 2100)
    assert cfg.decisions["context_window"]["value"] == 2048
    assert "window of 2,048 positions (max_position_embeddings 512 x the RoPE scaling" in capsys.readouterr().err
