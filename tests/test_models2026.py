"""The 2026 model generation on tiny random models built from transformers' configs: Qwen3.5 (dense), Qwen3.5-MoE and
Qwen3-Next (gated DeltaNet linear attention beside full attention; the MoE ones with a shared expert) and Gemma 4
(per-layer inputs).

- Exact packing: a packed row gives every example the logits and the gradients it gets alone, at sizes where a leak
  would show (examples longer than the 64-token chunk of the delta rule and than Gemma 4's sliding window; a conv
  window of 4). The same row without cu_seq_lens (what a block-diagonal mask alone gives the linear layers) does leak:
  the check can fail.
- Every command on a tiny model of each family: train (packed, as `train` packs on a CPU), eval, chat, predict,
  serve (the decode engine's DynamicCache batch keeps each row's recurrent state, token for token as `generate`),
  export (merged; GGUF refused by name), GRPO (roll-outs through the decode engine) and the studio's chat.
"""

from __future__ import annotations

import io
import json
import sys

import pytest
import torch
import yaml
from test_serve_engine import generate_alone, random_prompts, run_staggered

from steadytune.cli import main
from steadytune.config import load_config
from steadytune.data.packing import PackedCollator
from steadytune.errors import UserError
from steadytune.hardware.attention_kernels import segment_sdpa_kernel
from steadytune.infer.gguf_file import NOT_WRITTEN, gguf_architecture
from steadytune.model.attention import packed_mask_placeholder, register_varlen_attention
from steadytune.model.linear_attention import conv_by_sequence, keep_packed_sequences_apart, linear_attention_layers
from steadytune.model.tiny import MODELS_2026, build_model, build_tokenizer, save_tiny_model
from steadytune.train import run_training

HYBRID = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
# 70 > the delta rule's 64-token chunks and > Gemma 4's sliding window (16); 9 < both; every one > the conv window.
LENGTHS = [37, 70, 9, 66]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def examples(tokenizer, lengths=LENGTHS, seed=1) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(5, len(tokenizer), (n,), generator=g).tolist()} for n in lengths]


def objective(logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """A scalar that reads every logit (a fixed random projection), so every weight gets a gradient."""
    return (logits.float().log_softmax(-1) * weights).sum()


def logits_and_grads(model, run) -> tuple[torch.Tensor, dict]:
    model.zero_grad()
    logits = run()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", MODELS_2026)
def test_packed_rows_give_each_example_its_own_logits_and_gradients(kind, tokenizer):
    model = build_model(kind, tokenizer, attn_implementation=register_varlen_attention(segment_sdpa_kernel))
    keep_packed_sequences_apart(model)
    rows = examples(tokenizer)
    weights = torch.randn(sum(LENGTHS), len(tokenizer), generator=torch.Generator().manual_seed(2))
    starts = [sum(LENGTHS[:i]) for i in range(len(LENGTHS))]

    def unpacked():
        out = []
        for row, start in zip(rows, starts):
            ids = torch.tensor([row["input_ids"]])
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0]
            objective(logits, weights[start:start + len(logits)]).backward()
            out.append(logits)
        return torch.cat(out)

    batch = PackedCollator(pad_token_id=tokenizer.pad_token_id, row_len=512, attention="varlen")(rows)
    inputs = {k: batch[k] for k in ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                                    "max_length_k")}

    def packed():
        logits = model(**inputs, attention_mask=packed_mask_placeholder(inputs["input_ids"]), use_cache=False).logits[0]
        objective(logits, weights).backward()
        return logits

    want, want_grads = logits_and_grads(model, unpacked)
    got, got_grads = logits_and_grads(model, packed)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert set(got_grads) == set(want_grads) and len(got_grads) > 10
    for name, grad in want_grads.items():   # fp32 sums in another order: a tolerance at each tensor's scale
        scale = float(grad.abs().max()) or 1.0
        torch.testing.assert_close(got_grads[name], grad, atol=1e-4 * scale, rtol=1e-3,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("kind", HYBRID)
def test_the_same_row_without_sequence_bounds_leaks_into_the_next_example(kind, tokenizer):
    """What packing by position ids and a block-diagonal mask alone gives the linear-attention layers: their state
    runs on from one example into the next. The check above would catch it."""
    model = build_model(kind, tokenizer).eval()
    rows = examples(tokenizer)
    batch = PackedCollator(pad_token_id=tokenizer.pad_token_id, row_len=512, attention="sdpa")(rows)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        second = model(input_ids=torch.tensor([rows[1]["input_ids"]]), use_cache=False).logits[0]
    assert linear_attention_layers(model.config) == 1
    assert (packed[LENGTHS[0]:LENGTHS[0] + LENGTHS[1]] - second).abs().max() > 1e-3


def test_the_conv_window_restarts_at_each_sequence_and_nowhere_else():
    torch.manual_seed(0)
    x, weight = torch.randn(1, 6, 20), torch.randn(6, 4)
    cu = torch.tensor([0, 7, 7, 20], dtype=torch.int32)   # with an empty sequence, as static shapes end
    per_sequence = conv_by_sequence(x, weight, None, "silu", cu)
    whole = torch.nn.functional.silu(torch.nn.functional.conv1d(x, weight.unsqueeze(1), padding=3, groups=6)[..., :20])
    alone = torch.nn.functional.silu(torch.nn.functional.conv1d(x[..., 7:], weight.unsqueeze(1), padding=3,
                                                                groups=6)[..., :13])
    torch.testing.assert_close(per_sequence[..., :7], whole[..., :7])
    torch.testing.assert_close(per_sequence[..., 7:], alone)
    assert not torch.allclose(per_sequence[..., 7:10], whole[..., 7:10])   # the window would read sequence one
    torch.testing.assert_close(per_sequence[..., 10:], whole[..., 10:])


def test_fp8_base_leaves_the_gated_deltanet_projections_alone(tokenizer):
    from peft import LoraConfig, get_peft_model

    from steadytune.model.fp8_base import eligible_layers

    model = get_peft_model(build_model("qwen3_5", tokenizer, hidden_size=64, intermediate_size=128),
                           LoraConfig(r=4, target_modules="all-linear"))
    names = {id(m): n for n, m in model.named_modules()}
    chosen = [names[id(m)] for m, _ in eligible_layers(model)]
    assert chosen and not any(".linear_attn." in n for n in chosen)
    assert any(".self_attn.q_proj" in n for n in chosen) and any(".mlp.down_proj" in n for n in chosen)


def test_gemma4_per_layer_inputs_are_lora_targets_as_llamafactory_takes_them(tokenizer):
    """LLaMA-Factory's lora_target all: every module with Linear in its class name but the head, by leaf name
    (find_all_linear_modules): for Gemma 4 that includes its per-layer input gate and projections."""
    from steadytune.model.lora import resolve_lora_targets

    model = build_model("gemma4", tokenizer)
    llamafactory = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                    if "Linear" in type(m).__name__ and "lm_head" not in n}
    targets = set(resolve_lora_targets(model, "all"))
    assert targets == llamafactory
    assert {"per_layer_input_gate", "per_layer_projection", "per_layer_model_projection"} <= targets


@pytest.mark.parametrize("kind", HYBRID)
def test_the_decode_engine_keeps_each_rows_recurrent_state_as_rows_leave(kind, tokenizer):
    model = build_model(kind, tokenizer).eval()
    prompts, budgets = random_prompts(5), [6, 9, 4, 7, 5]
    want = [generate_alone(model, p, b) for p, b in zip(prompts, budgets)]
    assert run_staggered(model, prompts, budgets, batch="dynamic") == want


@pytest.mark.parametrize("kind", MODELS_2026)
def test_gguf_export_is_refused_by_name(kind, tokenizer):
    model = build_model(kind, tokenizer)
    arch, name, _ = NOT_WRITTEN[model.config.model_type]
    with pytest.raises(UserError, match=f"{name} .*llama.cpp reads it .architecture {arch.lower()}"):
        gguf_architecture(model)


def test_a_hybrid_model_packs_only_as_one_varlen_row(tmp_path, sample_data_dir):
    base = save_tiny_model(tmp_path / "base", "qwen3_5")
    keys = {"model_name_or_path": str(base), "dataset": "alpaca_sample", "dataset_dir": str(sample_data_dir),
            "template": "qwen", "output_dir": str(tmp_path / "out"), "packing": True, "packing_attention": "sdpa"}
    with pytest.raises(UserError, match="packing_attention: sdpa, but its 1 gated DeltaNet"):
        run_training(load_config(None, keys), progress=False)


# --- every command, on a tiny model of each family ------------------------------------------------------------

LABELS = ["消极", "积极"]
NEG = ["太差了", "很失望", "再也不买了", "包装破损", "讨厌"]
POS = ["很好", "质量不错", "非常满意", "物流很快", "喜欢"]


@pytest.fixture(scope="module", params=MODELS_2026)
def trained(request, tmp_path_factory) -> dict:
    """`steadytune train` of a LoRA classification run (packed, as a CPU run packs by default) on one family."""
    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    rows = [{"text": t, "label": LABELS[0]} for t in NEG] + [{"text": t, "label": LABELS[1]} for t in POS]
    (root / "reviews.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows * 2),
                                        encoding="utf-8")
    config = {"model_name_or_path": str(save_tiny_model(root / "base", kind)), "dataset": str(root / "reviews.jsonl"),
              "eval_dataset": str(root / "reviews.jsonl"), "template": "qwen", "label_names": LABELS,
              "prompt_template": "评论：{text}情感：", "cutoff_len": 128, "output_dir": str(root / "run"),
              "per_device_train_batch_size": 4, "max_steps": 2, "lora_rank": 4, "learning_rate": 1e-2,
              "max_new_tokens": 6}
    (root / "run.yaml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    assert main(["train", str(root / "run.yaml")]) == 0
    return {"kind": kind, "root": root, "run": root / "run", "config": root / "run.yaml"}


def test_train_packs_and_says_which_kernels_run_the_linear_layers(trained):
    decisions = yaml.safe_load((trained["run"] / "run_config.yaml").read_text(encoding="utf-8"))["decisions"]
    assert decisions["packing"]["value"] is True
    if trained["kind"] in HYBRID:
        assert decisions["packing_attention"]["value"] == "varlen"
        assert decisions["linear_attention"]["value"] == "reference"
        assert "gated DeltaNet" in decisions["linear_attention"]["reason"]
    else:
        assert "linear_attention" not in decisions


def test_eval_chat_predict_of_the_run(trained, tmp_path, monkeypatch, capsys):
    assert main(["eval", str(trained["config"])]) == 0
    # Two steps teach a random tiny model nothing: this is the command going through, with its numbers written.
    score = json.loads((trained["run"] / "eval_results.json").read_text(encoding="utf-8"))["score"]
    assert 0.0 <= score["accuracy"] <= 1.0 and sum(map(sum, score["confusion"]["matrix"])) == 20
    monkeypatch.setattr(sys, "stdin", io.StringIO("很好\n/exit\n"))
    assert main(["chat", str(trained["run"])]) == 0
    assert any(label in capsys.readouterr().out for label in LABELS)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "太差了"}\n{"text": "很好"}\n', encoding="utf-8")
    assert main(["predict", str(trained["run"]), "--input", str(rows), "--output", str(tmp_path / "out.jsonl")]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["label"] in LABELS for r in out] == [True, True]


def test_serve_answers_chat_through_the_decode_engine(trained):
    pytest.importorskip("fastapi", reason="serve needs FastAPI (pip install '.[serve]')")
    from fastapi.testclient import TestClient

    from steadytune.serve.app import build_app
    from steadytune.serve.command import build_engine
    from steadytune.serve.limits import ServeSettings
    from steadytune.serve.loading import load_served

    loaded = load_served(str(trained["run"]), [], [], None)
    engine = build_engine(loaded, max_batch=4, max_queue=8)
    with TestClient(build_app(engine, loaded, ServeSettings(api_key=None))) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": "很好"}], "max_tokens": 5,
                "temperature": 0, "n": 2}
        answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    choices = answer.json()["choices"]
    assert len(choices) == 2 and choices[0]["message"]["content"] == choices[1]["message"]["content"]


def test_export_merged_gives_the_adapters_logits_and_gguf_is_refused(trained, capsys):
    from transformers import AutoModelForCausalLM

    from steadytune.infer.loading import load_run, open_run

    merged = trained["root"] / "merged"
    assert main(["export", str(trained["run"]), f"export_dir={merged}"]) == 0
    ids = torch.tensor([[5, 9, 30, 41, 7, 12, 99, 3]])
    adapted, _ = load_run(open_run(str(trained["run"])), device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    plain = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, adapted(ids).logits, atol=1e-4, rtol=1e-4)
    capsys.readouterr()
    assert main(["export", str(trained["run"]), f"export_dir={trained['root'] / 'gguf'}", "export_format=gguf"]) == 1
    assert "llama.cpp reads it" in capsys.readouterr().err
    assert not (trained["root"] / "gguf").exists()


def test_grpo_rolls_out_through_the_decode_engine(trained, tmp_path):
    rows = [{"instruction": f"What is {i} plus {i % 5}?", "input": "", "output": str(i + i % 5)} for i in range(8)]
    (tmp_path / "sums.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"sums": {"file_name": "sums.json"}}), encoding="utf-8")
    keys = {"model_name_or_path": str(trained["root"] / "base"), "stage": "grpo", "dataset": "sums",
            "dataset_dir": str(tmp_path), "template": "qwen", "cutoff_len": 64, "output_dir": str(tmp_path / "out"),
            "per_device_train_batch_size": 2, "num_generations": 2, "max_completion_length": 4,
            "reward_funcs": "[length]", "max_steps": 2, "lora_rank": 4}
    result = run_training(load_config(None, [f"{k}={v}" for k, v in keys.items()]), progress=False)
    assert result.global_step == 2 and (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_studio_chat_streams_the_run(trained):
    pytest.importorskip("fastapi", reason="the studio needs FastAPI (pip install '.[studio]')")
    from fastapi.testclient import TestClient

    from steadytune.studio.app import StudioSettings, build_app

    runs = trained["root"]
    app = build_app(StudioSettings(runs_dir=runs, cwd=runs.parent))
    with TestClient(app, base_url="http://127.0.0.1:7860") as studio:
        response = studio.post("/api/runs/run/chat", json={"text": "很好", "side_by_side": False},
                               headers={"X-Studio": "1"})
    assert response.status_code == 200
    events = [json.loads(line[6:]) for line in response.text.split("\n\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    assert not any("error" in e for e in events), events
    assert [e["label"] in LABELS for e in events if "label" in e] == [True]


def test_bench_packs_a_hybrid_shape_as_one_varlen_row_and_matches_the_plain_loss(tmp_path):
    """bench's steadytune arm on the gated DeltaNet shape: packed as train packs it (one varlen row; SDPA per example
    for full attention on a CPU), the layers told where each example starts, the same loss as the plain recipe."""
    from steadytune.bench.command import disagreeing_losses

    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "hybrid-tiny", "--device", "cpu", "--examples", "40", "--plain-batch", "2",
                 "--max-tokens", "512", "--warmup", "1", "--window", "2", "--steps", "2", "--isolate", "none",
                 "--arms", "plain,steadytune", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    settings = report["arms"]["steadytune"]["settings"]
    assert settings["packing_attention"]["value"] == "varlen" and settings["packing_attention"]["kernel"] == "segment_sdpa"
    assert settings["linear_attention"]["value"] == "reference"
    assert settings["cuda_graphs"]["value"] is False
    assert report["loss_disagreement"] == {} == disagreeing_losses(report["arms"])


def test_doctor_says_a_hybrid_model_packs_as_one_varlen_row(tmp_path):
    """`doctor --config` gives train's own packing decision for a Qwen3.5 folder, and names a packing_attention that
    would leak."""
    from steadytune.doctor.plan import train_plan_findings
    from steadytune.hardware.backend import HardwareInfo

    base = save_tiny_model(tmp_path / "base", "qwen3_5")
    info = HardwareInfo(backend="cpu", torch_version=torch.__version__)
    cfg = load_config(None, {"model_name_or_path": str(base), "packing": True})
    said = " ".join(f"{f.what} {f.why}" for f in train_plan_findings(info, "plan", cfg, offline=False))
    assert "packed rows keep examples apart with varlen (segment_sdpa)" in said and "gated DeltaNet" in said
    cfg = load_config(None, {"model_name_or_path": str(base), "packing": True, "packing_attention": "sdpa"})
    errors = [f for f in train_plan_findings(info, "plan", cfg, offline=False) if f.severity == "error"]
    assert errors and "packing_attention: sdpa, but its 1 gated DeltaNet" in errors[0].what
