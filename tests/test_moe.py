"""Mixtures of experts: LoRA reaches the routed experts (transformers 5's fused 3-D weights, through peft's
target_parameters), the grouped forward computes what peft's own forward and a per-expert loop compute, the routers
stay frozen unless asked, and a run says what it trains by kind. Tiny random models of each family on a CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from sample_data import ALPACA, sample_dir

from steadytune.config import ConfigError, load_config
from steadytune.model.lora import attach_adapter, load_trained_adapter
from steadytune.model.moe.anatomy import (
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERT,
    active_parameters,
    count_by_kind,
    expert_sites,
    parameter_kind,
)
from steadytune.model.moe.experts_lora import grouped_lora_forward, is_grouped
from steadytune.model.moe.grouped import group_ends, grouped_mm
from steadytune.model.moe.routing import load_balancing_loss
from steadytune.model.tiny import MOE_KINDS, build_model, save_tiny_model
from steadytune.train import run_training
from steadytune.training.monitor import read_metrics


def lora_model(kind: str, lora_target: str = "all", seed: int = 0, **keys):
    """A tiny MoE with steadytune's LoRA attached as `train` attaches it, lora_B non-zero (so every path matters)."""
    cfg = load_config(None, [f"lora_target={lora_target}", "lora_rank=4", *(f"{k}={v}" for k, v in keys.items())])
    model = attach_adapter(build_model(kind, seed=seed), cfg)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model, cfg


def loss_and_grads(model, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = model(input_ids=ids).logits
    (logits.float() ** 2).mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def per_expert_reference(experts, hidden, top_k_index, top_k_weights, lora: dict) -> torch.Tensor:
    """The experts written out one token and one expert at a time, W + scaling * B_e A_e made explicitly: what the
    grouped forward must equal (independent of its sorting, grouping and rank padding)."""
    up_name = "gate_up_proj" if hasattr(experts, "gate_up_proj") else "up_proj"

    def weight(name: str, e: int) -> torch.Tensor:   # [out, in]
        w = getattr(experts, name)[e]
        w = w.T if experts.is_transposed else w
        if name in lora:
            a, b, scaling = lora[name]
            r = a.shape[0] // experts.num_experts
            a_e = a.view(experts.num_experts, r, -1)[e]
            b_e = b.view(b.shape[0], r, experts.num_experts)[:, :, e]
            w = w + scaling * b_e @ a_e
        return w

    out = torch.zeros_like(hidden)
    for t in range(hidden.shape[0]):
        for slot in range(top_k_index.shape[1]):
            e = int(top_k_index[t, slot])
            up = hidden[t] @ weight(up_name, e).T
            if experts.has_bias:
                up = up + getattr(experts, f"{up_name}_bias")[e]
            h = experts._apply_gate(up[None])[0] if experts.has_gate else experts.act_fn(up)
            down = h @ weight("down_proj", e).T
            if experts.has_bias:
                down = down + experts.down_proj_bias[e]
            out[t] += top_k_weights[t, slot] * down
    return out


# --- LoRA reaches the routed experts --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", MOE_KINDS)
def test_lora_target_all_trains_the_routed_experts_and_leaves_the_routers_frozen(kind):
    model, cfg = lora_model(kind)
    counts = count_by_kind(model)
    assert counts[ROUTED_EXPERTS].trainable > 0 and counts[ROUTER].trainable == 0 and counts[ROUTER].total > 0
    if kind in ("qwen2_moe", "deepseek_v2"):   # their shared experts are linear layers: adapted too
        assert counts[SHARED_EXPERT].trainable > 0
    assert "experts." in cfg.decisions["lora_target"]["value"]
    # every fused experts module is adapted, and runs the grouped forward
    sites = expert_sites(model)
    assert sites and all(is_grouped(site.module) for site in sites)


def test_the_count_by_kind_shows_frozen_experts_when_lora_target_leaves_them_out(tmp_path, capsys):
    """The failure issue 52 found: lora_target naming only attention trains no expert, and the start says so."""
    folder = save_tiny_model(tmp_path / "m", "qwen3_moe")
    out = tmp_path / "run"
    overrides = {"model_name_or_path": folder, "dataset": ALPACA, "dataset_dir": sample_dir(), "template": "qwen",
                 "cutoff_len": 48, "max_samples": 8, "output_dir": out, "per_device_train_batch_size": 4,
                 "max_steps": 1, "lora_rank": 4, "lora_target": "q_proj,v_proj"}
    run_training(load_config(None, [f"{k}={v}" for k, v in overrides.items()]), progress=False)
    printed = capsys.readouterr()
    assert "adapts none of the routed experts" in printed.err
    assert "routed experts 0 (frozen)" in printed.out


def test_lora_target_names_of_the_experts_map_to_their_fused_weights():
    model, cfg = lora_model("qwen3_moe", lora_target="q_proj,down_proj")
    wrapped = {w.parameter_name for site in expert_sites(model) for w in _chain(site.module)}
    assert wrapped == {"down_proj"}
    # gate_proj / up_proj of a transformers 4 file: the fused gate_up_proj, said in the decisions
    model, cfg = lora_model("qwen3_moe", lora_target="q_proj,gate_proj,up_proj")
    assert {w.parameter_name for site in expert_sites(model) for w in _chain(site.module)} == {"gate_up_proj"}
    assert "fused gate_up_proj" in cfg.decisions["lora_target_experts"]["reason"]
    with pytest.raises(ConfigError, match="router"):
        lora_model("qwen3_moe", lora_target="q_proj,gate")
    with pytest.raises(ConfigError, match="routed experts"):
        lora_model("qwen3_moe", lora_target="q_proj,w9")


def test_lora_dropout_with_expert_lora_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="lora_dropout: 0.1 with LoRA on the routed experts"):
        lora_model("qwen3_moe", lora_dropout=0.1)


def test_train_router_trains_the_routers_in_full():
    model, cfg = lora_model("qwen3_moe", train_router="true")
    counts = count_by_kind(model)
    assert counts[ROUTER].trainable > 0
    assert "gate" in cfg.decisions["train_router"]["reason"]


def test_deepseek_dense_and_shared_linears_are_adapted_beside_the_fused_experts():
    """peft would rename gate_proj/up_proj/down_proj to the fused experts for deepseek_v2 (its transformers 4
    conversion) and leave the dense MLP and shared experts frozen; steadytune's targets are kept as written."""
    model, _ = lora_model("deepseek_v2")
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".layers.0.mlp.gate_proj.lora_A" in n for n in names)          # the dense first layer
    assert any("shared_experts.down_proj.lora_A" in n for n in names)
    a = next(p for n, p in model.named_parameters() if "experts.lora_A" in n and "shared" not in n)
    assert a.shape[0] == 4 * 4   # rank 4 for each of 4 experts: not doubled by a fused-name conversion


def _chain(module):
    while type(module).__name__ == "ParamWrapper":
        yield module
        module = module.base_layer


# --- the grouped forward computes the same thing -------------------------------------------------------------

@pytest.mark.parametrize("kind", MOE_KINDS)
def test_grouped_forward_matches_peft_s_own_forward_in_logits_and_every_lora_gradient(kind):
    model, _ = lora_model(kind)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    logits, grads = loss_and_grads(model, ids)
    for site in expert_sites(model):     # peft's forward: W + scaling * B @ A per expert, the model's own experts code
        del site.module.forward
    ref_logits, ref_grads = loss_and_grads(model, ids)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    expert_grads = [n for n in grads if "experts" in n and "lora_" in n]
    assert expert_grads and all(grads[n].abs().max() > 0 for n in expert_grads)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["qwen3_moe", "gpt_oss"])
def test_grouped_experts_match_a_per_expert_loop_reference_in_fp32(kind):
    """The expert LoRA gradients against a token-by-token loop that builds W + s B_e A_e itself (gpt-oss: transposed
    weights, biases, its own gate)."""
    model, _ = lora_model(kind)
    site = expert_sites(model)[0]
    chain = list(_chain(site.module))
    experts = chain[-1].base_layer
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(7, model.config.hidden_size, generator=generator, requires_grad=True)
    top_k = torch.stack([torch.randperm(experts.num_experts, generator=generator)[:2] for _ in range(7)])
    weights = torch.softmax(torch.randn(7, 2, generator=generator), -1)
    target = torch.randn(7, model.config.hidden_size, generator=generator)

    got = grouped_lora_forward(site.module, hidden, top_k, weights)
    (got * target).sum().backward()
    got_grads = {w.parameter_name: (w.lora_A["default"].weight.grad.clone(), w.lora_B["default"].weight.grad.clone())
                 for w in chain}
    hidden_grad = hidden.grad.clone()
    for w in chain:
        w.lora_A["default"].weight.grad = w.lora_B["default"].weight.grad = None
    hidden.grad = None
    lora = {w.parameter_name: (w.lora_A["default"].weight, w.lora_B["default"].weight, w.scaling["default"])
            for w in chain}
    want = per_expert_reference(experts, hidden, top_k, weights, lora)
    (want * target).sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden_grad, hidden.grad, rtol=1e-5, atol=1e-5)
    for w in chain:
        a_grad, b_grad = got_grads[w.parameter_name]
        assert a_grad.abs().max() > 0 and b_grad.abs().max() > 0
        torch.testing.assert_close(a_grad, w.lora_A["default"].weight.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(b_grad, w.lora_B["default"].weight.grad, rtol=1e-4, atol=1e-6)


def test_grouped_matmul_backends_agree_with_the_loop_and_leave_empty_groups_alone():
    generator = torch.Generator().manual_seed(0)
    groups = torch.tensor([0, 0, 2, 2, 2, 3, 3, 3, 3])   # group 1 empty
    ends = group_ends(groups, 4)
    assert ends.tolist() == [2, 2, 5, 9]
    x = torch.randn(9, 8, generator=generator, requires_grad=True)
    w = torch.randn(4, 6, 8, generator=generator).transpose(1, 2).requires_grad_()   # a transposed view, as weights
    dy = torch.randn(9, 6, generator=generator)
    results = {}
    for backend in ("torch", "loop"):
        x.grad = w.grad = None
        y = grouped_mm(x, w, ends, backend)
        (y * dy).sum().backward()
        results[backend] = (y.detach(), x.grad.clone(), w.grad.clone())
    want = torch.cat([x[:2] @ w[0], x[2:5] @ w[2], x[5:] @ w[3]])
    for y, dx, dw in results.values():
        torch.testing.assert_close(y, want.detach(), rtol=1e-5, atol=1e-5)
        assert dw[1].abs().max() == 0
    torch.testing.assert_close(results["torch"][1], results["loop"][1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results["torch"][2], results["loop"][2], rtol=1e-5, atol=1e-5)


def test_the_padded_layout_starts_every_expert_on_an_aligned_row_and_keeps_every_pair():
    from steadytune.model.moe.experts_lora import GROUP_ROWS, padded_layout, padded_rows

    sorted_experts, _ = torch.sort(torch.tensor([3, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 0]))   # expert 1 has none
    dest, ends, rows = padded_layout(sorted_experts, 4)
    assert rows == padded_rows(14, 4) and rows % GROUP_ROWS == 0 and ends[-1] == rows
    starts = torch.cat([torch.zeros(1, dtype=torch.int32), ends[:-1]])
    assert all(int(start) % GROUP_ROWS == 0 for start in starts)
    assert len(set(dest.tolist())) == 14                                  # one row per pair
    for row, expert in zip(dest.tolist(), sorted_experts.tolist()):       # each pair inside its expert's group
        assert starts[expert] <= row < ends[expert]


def test_the_grouped_forward_traces_whole_under_torch_compile():
    """Compiled decoder layers (train's default on a GPU) take the grouped experts without a graph break (on a CPU
    in fp32 the per-expert loop runs as one custom op)."""
    model, _ = lora_model("qwen3_moe")
    layer = model.base_model.model.model.layers[0]
    hidden = torch.randn(1, 6, model.config.hidden_size)
    positions = torch.arange(6)[None]
    rotary = model.base_model.model.model.rotary_emb(hidden, positions)

    def run(x):
        out = layer(x, position_embeddings=rotary, attention_mask=None, position_ids=positions)
        return out[0] if isinstance(out, tuple) else out

    torch._dynamo.reset()
    try:
        compiled = torch.compile(run, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(hidden), run(hidden), rtol=1e-5, atol=1e-5)
    finally:
        torch._dynamo.reset()


TRITON_CHILD = textwrap.dedent("""
    import torch
    import triton.runtime.interpreter as interpreter
    # numpy 2 refuses int() of a one-element array, which Triton 3.6's interpreter uses for loop bounds
    _patch = interpreter._patch_lang_tensor
    def _patched(tensor, scope):
        _patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    interpreter._patch_lang_tensor = _patched
    from steadytune.model.moe.grouped import group_ends, loop_grouped_mm
    from steadytune.model.moe.grouped_triton import triton_grouped_mm
    g = torch.Generator().manual_seed(0)
    groups, _ = torch.sort(torch.tensor([0] * 70 + [2] * 5 + [3] * 66 + [4] * 9))   # one empty, one past a tile
    ends = group_ends(groups, 5)
    x = torch.randn(150, 40, generator=g, requires_grad=True)
    w = torch.randn(5, 24, 40, generator=g).transpose(1, 2).detach().requires_grad_()
    dy = torch.randn(150, 24, generator=g)
    out = []
    for run in (triton_grouped_mm, loop_grouped_mm):
        x.grad = w.grad = None
        y = run(x, w, ends)
        (y * dy).sum().backward()
        out.append((y.detach(), x.grad.clone(), w.grad.clone()))
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    print("triton grouped kernels match the loop")
""")


@pytest.mark.skipif(not __import__("importlib.util").util.find_spec("triton"),
                    reason="Triton is not installed (CPU wheels): the kernels are checked where it is")
def test_the_triton_grouped_kernels_match_the_loop_in_triton_s_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", TRITON_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "match the loop" in done.stdout


# --- the router's loss and statistics -------------------------------------------------------------------------

def test_load_balancing_loss_is_transformers_own_with_and_without_padding():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    generator = torch.Generator().manual_seed(0)
    logits = tuple(torch.randn(10, 4, generator=generator) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    for token_mask, hf_mask in ((None, None), (mask.reshape(-1).float(), mask)):
        ours, counts = load_balancing_loss(logits, 4, 2, token_mask)
        theirs = load_balancing_loss_func(logits, 4, 2, hf_mask)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
        assert counts.shape == (3, 4) and counts.sum() == 3 * 2 * (10 if token_mask is None else 7)


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_perfectly_balanced_routing_gives_an_aux_loss_of_top_k_as_the_docs_say(top_k):
    """docs/training.md said moe_aux_loss is 1 when perfectly balanced; for top-k routing it is k (transformers' own
    function agrees: 2.0 for top-2). Balanced: every expert equally likely for each token, and each chosen equally."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    experts = 8
    # token t prefers experts t, t+1, ... (mod 8) by a hair: every expert is chosen equally often, probabilities ~1/8
    logits = torch.stack([torch.roll(torch.linspace(1e-3, 0, experts), t) for t in range(experts * 4)])
    ours, counts = load_balancing_loss((logits, logits), experts, top_k, None)
    assert torch.all(counts == counts[0, 0]) and ours.item() == pytest.approx(top_k, rel=1e-3)
    assert load_balancing_loss_func((logits, logits), experts, top_k, None).item() == pytest.approx(top_k, rel=1e-3)
    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    assert "`moe_aux_loss` (1 when perfectly balanced)" not in docs
    assert "top_k (2.0 for top-2) when perfectly balanced" in docs


def run_tiny(tmp_path: Path, kind: str, **keys) -> Path:
    folder = save_tiny_model(tmp_path / f"m_{kind}", kind)
    out = tmp_path / f"run_{kind}"
    overrides = {"model_name_or_path": folder, "dataset": ALPACA, "dataset_dir": sample_dir(), "template": "qwen",
                 "cutoff_len": 48, "max_samples": 16, "output_dir": out, "per_device_train_batch_size": 4,
                 "max_steps": 4, "logging_steps": 2, "lora_rank": 4, "learning_rate": 5e-3, **keys}
    run_training(load_config(None, [f"{k}={v}" for k, v in overrides.items()]), progress=False)
    return out


def test_a_moe_run_logs_routing_adds_the_aux_loss_and_saves_a_peft_adapter_that_loads(tmp_path):
    with_aux = run_tiny(tmp_path, "qwen3_moe", moe_aux_loss_coef=0.5)
    steps = [r for r in read_metrics(with_aux / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [2, 4]
    for record in steps:
        assert record["moe_aux_loss"] >= 1.0 - 1e-6      # the Switch loss is 1 when balanced, more otherwise
        assert record["moe_load_max"] >= 1.0 >= record["moe_load_min"] >= 0.0
    loads = read_metrics(with_aux / "expert_load.jsonl")
    assert [r["step"] for r in loads] == [2, 4] and len(loads[0]["load"]) == 2 and len(loads[0]["load"][0]) == 4
    page = (with_aux / "report.html").read_text(encoding="utf-8")   # the report draws the routing
    assert 'id="experts-0"' in page and "routing: the busiest expert" in page
    config = json.loads((with_aux / "adapter_config.json").read_text())
    assert sorted(config["target_parameters"]) == ["experts.down_proj", "experts.gate_up_proj"]
    with safe_open(str(with_aux / "adapter_model.safetensors"), "pt") as f:
        assert sum(".mlp.experts." in k for k in f.keys()) == 2 * 4   # 2 layers x 2 projections x (A, B)
    # the same run without the aux term: the logged loss is cross-entropy alone (aux x 0.5 smaller)
    without = run_tiny(tmp_path / "plain", "qwen3_moe")
    first = [r for r in read_metrics(without / "metrics.jsonl") if "loss" in r][0]
    assert steps[0]["loss"] - first["loss"] == pytest.approx(0.5 * steps[0]["moe_aux_loss"], rel=0.05)

    # the adapter loads onto a fresh base (peft, through steadytune's loader), runs grouped, and changes the output
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 100, (1, 8))
    untrained = AutoModelForCausalLM.from_pretrained(tmp_path / "m_qwen3_moe")(input_ids=ids).logits
    loaded = load_trained_adapter(AutoModelForCausalLM.from_pretrained(tmp_path / "m_qwen3_moe"), with_aux)
    assert all(is_grouped(site.module) for site in expert_sites(loaded))
    grouped = loaded(input_ids=ids).logits
    for site in expert_sites(loaded):
        del site.module.forward   # peft's own forward over the same loaded adapter
    torch.testing.assert_close(grouped, loaded(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    assert (grouped - untrained).abs().max() > 1e-3


def test_parameter_kinds_and_active_parameters():
    assert parameter_kind("base_model.model.model.layers.3.mlp.experts.base_layer.lora_A.default.weight") == \
        ROUTED_EXPERTS
    assert parameter_kind("model.layers.0.mlp.gate.weight") == ROUTER
    assert parameter_kind("model.layers.0.mlp.shared_expert_gate.weight") == ROUTER
    assert parameter_kind("model.layers.0.mlp.shared_expert.down_proj.weight") == SHARED_EXPERT
    assert parameter_kind("model.layers.0.mlp.gate_proj.weight") == "dense MLP"
    model = build_model("qwen3_moe")
    active, total = active_parameters(model)
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert total == sum(p.numel() for p in model.parameters())
    assert active == total - experts + experts * 2 // 4   # 2 of 4 experts a token


def test_the_lora_budget_counts_every_expert_s_adapter():
    """lora_rank is checked against free memory before the adapters are made: a MoE's count includes one LoRA pair
    per expert of each adapted fused weight, exactly what peft then creates."""
    from steadytune.training.lora_budget import adapter_parameters

    for kind in ("qwen3_moe", "gpt_oss", "deepseek_v2"):
        made, _ = lora_model(kind)
        trainable = sum(p.numel() for p in made.parameters() if p.requires_grad)
        assert adapter_parameters(build_model(kind), "all", 4) == trainable
