"""`steadytune bench` on mixtures of experts: the shapes build from their published configs, every arm trains the same
parameters (the routed experts included), MFU counts a routed expert at top_k / experts, and --num-layers changes the
depth of every arm's model."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
import torch

from steadytune.bench import arms, workload
from steadytune.bench.command import disagreeing_losses
from steadytune.cli import main
from steadytune.model.moe.anatomy import ROUTED_EXPERTS, ROUTER, active_parameters, count_by_kind, expert_sites
from steadytune.model.moe.experts_lora import is_grouped
from steadytune.model.shapes import SHAPES, build_shape, is_moe_shape, shape_config
from steadytune.model.tiny import build_model

MOE_SHAPES = [name for name in SHAPES if is_moe_shape(name)]


@pytest.mark.parametrize("name, total, active", [
    # the published sizes: Qwen3-30B-A3B 30.5B / 3.3B, DeepSeek-V2-Lite 15.7B / 2.4B (2.7B with the embeddings and
    # head), Qwen1.5-MoE-A2.7B 14.3B / 2.7B, Mixtral-8x7B 46.7B / 12.9B, gpt-oss-20b 20.9B (3.6B active without
    # its 1.2B of embeddings and head: 4.2B with them)
    ("qwen3-30b-a3b", 30.5e9, 3.35e9), ("deepseek-v2-lite", 15.7e9, 2.66e9), ("qwen1.5-moe-a2.7b", 14.3e9, 2.69e9),
    ("mixtral-8x7b", 46.7e9, 12.9e9), ("gpt-oss-20b", 20.9e9, 4.19e9)])
def test_moe_shapes_build_from_their_published_configs(name, total, active):
    model = build_shape(name, dtype=torch.bfloat16, device="meta")   # no memory, whatever the size
    got_active, got_total = active_parameters(model)
    assert got_total == pytest.approx(total, rel=0.01) and got_active == pytest.approx(active, rel=0.01)
    assert count_by_kind(model)[ROUTED_EXPERTS].total > 0.75 * got_total
    assert model.config._attn_implementation == ("eager" if name == "gpt-oss-20b" else "sdpa")  # attention sinks


def test_every_moe_shape_is_listed_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert set(MOE_SHAPES) == {"qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v2-lite", "qwen1.5-moe-a2.7b", "mixtral-8x7b",
                               "moe-tiny", "qwen3.5-35b-a3b", "qwen3-next-80b-a3b"}
    for name in MOE_SHAPES:
        assert name in text


def test_num_layers_keeps_the_widths_and_follows_per_layer_lists():
    spec = shape_config("gpt-oss-20b", 3)
    assert spec["num_hidden_layers"] == 3 and spec["layer_types"] == ["sliding_attention", "full_attention",
                                                                      "sliding_attention"]
    assert spec["hidden_size"] == SHAPES["gpt-oss-20b"]["hidden_size"] and SHAPES["gpt-oss-20b"]["num_hidden_layers"] == 24
    full = active_parameters(build_shape("qwen3-30b-a3b", device="meta"))[1]
    twelve = active_parameters(build_shape("qwen3-30b-a3b", device="meta", num_layers=12))[1]
    embeddings = 2 * 151936 * 2048 + 2048   # embeddings, untied head, final norm
    assert (twelve - embeddings) * 4 == full - embeddings
    with pytest.raises(ValueError, match="no MoE layer"):
        shape_config("deepseek-v2-lite", 1)   # its first layer is dense


def test_active_parameters_count_a_routed_expert_at_top_k_over_experts():
    """moe-tiny (hidden 64, 2 layers, 8 experts of width 32, 2 a token, 4 query and 2 KV heads of 16, vocabulary
    2048, untied head) with bench's LoRA (r 16): the arithmetic by hand."""
    model = workload.with_lora(build_shape("moe-tiny"))
    hidden, layers, experts, top_k, width, vocab, r = 64, 2, 8, 2, 32, 2048, 16
    attention = hidden * 64 * 2 + hidden * 32 * 2 + 2 * 16   # q, o; k, v; q and k norms
    routed = experts * (2 * width * hidden + hidden * width)  # gate_up [E, 2 x width, hidden], down [E, hidden, width]
    per_layer = attention + 2 * hidden + experts * hidden + routed   # two norms, the router
    embeddings = vocab * hidden
    total = layers * per_layer + 2 * embeddings + hidden
    lora_attention = r * (hidden + 64) * 2 + r * (hidden + 32) * 2
    lora_routed = experts * r * (hidden + 2 * width) + experts * r * (width + hidden)   # A and B of gate_up, down
    counts = workload.parameter_counts(model)
    share = top_k / experts
    assert counts["total_parameters"] == total
    assert counts["active_parameters"] == total - layers * routed * (1 - share)
    assert counts["trainable_parameters"] == layers * (lora_attention + lora_routed)
    assert counts["trainable_by_kind"] == {"attention": layers * lora_attention, "routed experts": layers * lora_routed}
    # MFU: N leaves out the untied input embedding (a lookup); a routed expert and its LoRA factors at top_k / experts
    assert workload.param_counts(model) == (total - embeddings - layers * routed * (1 - share),
                                            layers * (lora_attention + lora_routed * share))


@pytest.mark.parametrize("kind", ["qwen3_moe", "qwen2_moe", "deepseek_v2", "gpt_oss"])
def test_the_plain_and_steadytune_arms_train_the_same_parameters_routed_experts_included(kind):
    """The plain recipe (peft target_parameters for the fused experts, the linear layers but the routers) and
    steadytune's attach_adapter adapt the same weights; the routers stay frozen, and DeepSeek-V2's dense MLP and
    shared experts keep their own LoRA (peft's transformers 4 renaming would move it onto the experts)."""
    plain = workload.with_lora(build_model(kind))
    ours, decided = arms.steadytune_experts(arms_args(), build_model(kind), torch.device("cpu"), "fp32")
    trainable = lambda m: {n.replace(".base_layer", "") for n, p in m.named_parameters() if p.requires_grad}  # noqa: E731
    assert trainable(plain) == trainable(ours)
    by_kind = count_by_kind(plain)
    assert by_kind[ROUTED_EXPERTS].trainable > 0 and by_kind[ROUTER].trainable == 0
    assert set(plain.peft_config["default"].target_parameters) == {"experts.gate_up_proj", "experts.down_proj"}
    if kind == "deepseek_v2":
        assert {"dense MLP", "shared expert"} <= {k for k, c in by_kind.items() if c.trainable}
    if kind == "qwen2_moe":
        assert by_kind["shared expert"].trainable > 0
        assert "shared_expert_gate" not in plain.peft_config["default"].target_modules   # a router: frozen
    assert decided["moe_grouped_mm"]["value"] == "torch"   # set_up_experts ran: CPU grouped matmul


def test_the_plain_recipe_checkpoints_where_peft_copies_of_the_experts_would_not_fit():
    on, why = arms.plain_checkpointing("qwen3-30b-a3b", 12, 30.0, torch.bfloat16)
    assert on and "copy of the routed experts" in why and "> 85% of the 30 GiB GPU" in why
    off, why = arms.plain_checkpointing("qwen3-30b-a3b", 12, 139.8, torch.bfloat16)
    assert not off and why.startswith("off: weights 15.1 GiB")
    assert arms.plain_checkpointing("tiny", None, 1e-6, torch.bfloat16)[0] is False   # dense: the recipe as it was
    assert arms.plain_checkpointing("gpt-oss-20b", 2, 139.8, torch.bfloat16)[0]   # eager attention's probabilities


def test_bench_trains_a_tiny_moe_in_both_arms_end_to_end(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "moe-tiny", "--num-layers", "3", "--device", "cpu", "--examples", "60",
                 "--plain-batch", "2", "--max-tokens", "512", "--warmup", "1", "--window", "3", "--steps", "3",
                 "--isolate", "none", "--arms", "plain,steadytune", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["num_layers"] == 3 and report["num_layers_overridden"] and report["moe"]
    plain, ours = report["arms"]["plain"], report["arms"]["steadytune"]
    for result in (plain, ours):
        assert result["trainable_by_kind"]["routed experts"] > 0 and result["stopped"] == "fixed steps"
        assert result["active_parameters"] < result["total_parameters"]
        assert 0 < result["loss"] < 2 * math.log(SHAPES["moe-tiny"]["vocab_size"])
    assert plain["trainable_by_kind"] == ours["trainable_by_kind"] and plain["parameters"] == ours["parameters"]
    assert ours["total_parameters"] == workload.parameter_counts(
        workload.with_lora(build_shape("moe-tiny", num_layers=3)))["total_parameters"]
    assert report["loss_disagreement"] == {} == disagreeing_losses(report["arms"])
    assert ours["settings"]["experts"]["moe_grouped_mm"]["value"] == "torch"
    assert plain["settings"]["lora"]["target_parameters"] == ["experts.down_proj", "experts.gate_up_proj"]
    assert "routed experts" in capsys.readouterr().out


def test_a_model_folder_that_would_not_fit_is_said_before_anything_is_written(tmp_path, monkeypatch, capsys):
    free = 10 * 2**30
    monkeypatch.setattr(workload.shutil, "disk_usage", lambda path: type("Usage", (), {"free": free})())
    folder = tmp_path / "models" / "qwen3-30b-a3b"
    with pytest.raises(workload.NoRoom) as raised:
        workload.make_model_folder("qwen3-30b-a3b", folder, torch.device("cpu"), num_layers=12)
    line = str(raised.value)
    assert "needs 32.4 GB" in line   # 8.1B parameters in fp32 (a CPU bench's dtype)
    assert "10.7 GB free" in line and "--num-layers" in line and "\n" not in line
    assert line in capsys.readouterr().out and not folder.exists()


def test_the_peers_count_parameters_as_bench_does(monkeypatch):
    """peer_timing restates workload.parameter_counts for the peers' processes (which cannot import steadytune)."""
    monkeypatch.syspath_prepend(str(Path(workload.__file__).parent))   # a child finds its siblings as a script does
    matmul_parameters = importlib.import_module("peer_timing").matmul_parameters

    for kind in ("qwen3_moe", "qwen2_moe", "deepseek_v2", "gpt_oss"):
        model = workload.with_lora(build_model(kind))
        ours, theirs = workload.parameter_counts(model), matmul_parameters(model)
        routed = ours["trainable_by_kind"]["routed experts"]
        assert theirs["trainable_by_kind"] == {"routed experts": routed, "other": ours["trainable_parameters"] - routed}
        assert {k: theirs[k] for k in ours if k != "trainable_by_kind"} == {k: v for k, v in ours.items()
                                                                         if k != "trainable_by_kind"}, kind


def test_llamafactory_on_a_moe_says_its_routed_experts_stay_frozen(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(workload.__file__).parent))
    lf_child = importlib.import_module("lf_child")

    fast = lf_child.fast_options(cuda=True, moe=True)
    assert fast["enable_liger_kernel"] is False and "mixture of experts" in fast["liger_reason"]
    assert "frozen" in lf_child.MOE_TARGET_REASON


def arms_args():
    import argparse
    return argparse.Namespace(moe_grouped_mm="auto")


@pytest.mark.parametrize("kind", ["qwen3_moe", "qwen2_moe", "deepseek_v2", "gpt_oss", "mixtral"])
def test_both_arms_compute_the_same_loss_and_expert_gradients(kind):
    """A step of each arm's model on the same batch, with the same non-zero LoRA weights: peft's parametrized experts
    (plain) and steadytune's grouped ones give the same loss and the same LoRA gradients (fp32, CPU)."""
    plain = workload.with_lora(build_model(kind))
    ours, _ = arms.steadytune_experts(arms_args(), build_model(kind), torch.device("cpu"), "fp32")
    assert all(is_grouped(site.module) for site in expert_sites(ours))          # steadytune's grouped forward
    assert not any(is_grouped(site.module) for site in expert_sites(plain))     # peft's own
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for (name, p), (_, q) in zip(plain.named_parameters(), ours.named_parameters()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            q.copy_(p)
    ids = torch.randint(5, plain.config.vocab_size - 1, (2, 12), generator=g)
    losses, grads = [], []
    for model in (plain, ours):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({n.replace(".base_layer", ""): p.grad for n, p in model.named_parameters()
                      if p.requires_grad and "experts" in n})
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, grad in grads[0].items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-4, atol=1e-6)


def test_a_plain_moe_step_that_runs_out_of_memory_is_tried_again_with_checkpointing(monkeypatch):
    tried = []

    def fake(name, args, device, batch, liger, pad_multiple, checkpointing=False):
        tried.append(checkpointing)
        if not checkpointing:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.17 GiB")
        return {"name": name, "settings": {"batch": batch}}

    monkeypatch.setattr(arms, "run_trainer_arm", fake)
    import argparse
    result = arms.run_plain(argparse.Namespace(shape="moe-tiny", num_layers=None, plain_batch=8), torch.device("cpu"))
    assert tried == [False, True]
    assert result["settings"]["gradient_checkpointing"] == {"value": True,
                                                            "reason": "on: a step without it ran out of memory"}
    with pytest.raises(torch.OutOfMemoryError):   # a dense shape keeps the plain recipe as it was: no second try
        arms.run_plain(argparse.Namespace(shape="tiny", num_layers=None, plain_batch=8), torch.device("cpu"))
