"""Using a mixture-of-experts LoRA run: the merged export (the adapter folded into every expert), GGUF files llama.cpp
reads (qwen3moe, qwen2moe, Mixtral as llama with experts; a one-line refusal for the rest), and chat, predict and
serve through our decode engine with the expert adapter active, token for token as transformers' `generate`.

One tiny Qwen3-MoE run is trained once for the module (4 steps at a high learning rate, so the adapter moves the
logits); everything else reuses it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from sample_data import ALPACA, sample_dir
from test_serve_engine import collect, generate_alone, random_prompts, run_staggered

from steadytune.config import load_config
from steadytune.data.readers import Row
from steadytune.errors import UserError
from steadytune.infer.export import export_merged
from steadytune.infer.gguf_file import read_back, verify_gguf, write_gguf
from steadytune.infer.loading import load_for_inference, load_run, open_run
from steadytune.infer.merge import merge_adapter
from steadytune.model.decode.sampling import SamplingParams
from steadytune.model.moe.anatomy import expert_sites
from steadytune.model.moe.experts_lora import is_grouped
from steadytune.model.tiny import build_model, build_tokenizer, save_tiny_model
from steadytune.serve.engine import BatchingEngine
from steadytune.serve.loading import load_served
from steadytune.train import run_training

TEXTS = ["The quick brown fox jumps over the lazy dog.", "这个商品很好，质量不错", "What is the capital of France?"]


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory) -> dict:
    """A Qwen3-MoE LoRA run (norm_topk_prob true, as every released Qwen3-MoE sets it: llama.cpp's qwen3moe always
    renormalises) with the routed experts adapted."""
    root = tmp_path_factory.mktemp("moe")
    base = save_tiny_model(root / "base", "qwen3_moe", norm_topk_prob=True)
    keys = {"model_name_or_path": str(base), "dataset": ALPACA, "dataset_dir": str(sample_dir()), "template": "qwen",
            "cutoff_len": 64, "max_samples": 16, "output_dir": str(root / "run"), "per_device_train_batch_size": 4,
            "max_steps": 4, "lora_rank": 4, "learning_rate": 5e-2, "max_new_tokens": 8}
    run_training(load_config(None, [f"{k}={v}" for k, v in keys.items()]), progress=False)
    adapter = json.loads((root / "run" / "adapter_config.json").read_text(encoding="utf-8"))
    assert sorted(adapter["target_parameters"]) == ["experts.down_proj", "experts.gate_up_proj"]
    return {"root": root, "base": base, "run": root / "run"}


@pytest.fixture(scope="module")
def adapted(moe_run):
    """The run loaded as chat / serve load it: the adapter on its base, the experts' grouped forward installed."""
    model, tokenizer = load_run(open_run(str(moe_run["run"])), device=torch.device("cpu"), dtype=torch.float32,
                                quiet=True)
    return model, tokenizer


@pytest.fixture(scope="module")
def merged(moe_run):
    """`steadytune export RUN` (the merged folder), loaded back as a plain transformers model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = moe_run["root"] / "merged"
    export_merged(open_run(str(moe_run["run"])), out, verify=False)
    return out, AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(out)


def logits(model, tokenizer, text: str) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([tokenizer(text)["input_ids"]])).logits[0].float()


def test_merged_export_folds_the_adapter_into_every_expert(moe_run, adapted, merged):
    from transformers import AutoModelForCausalLM

    model, tokenizer = adapted
    folder, merged_model, _ = merged
    base = AutoModelForCausalLM.from_pretrained(moe_run["base"], dtype=torch.float32).eval()
    assert not (folder / "adapter_config.json").exists()
    for text in TEXTS:
        ours = logits(model, tokenizer, text)
        assert (ours - logits(base, tokenizer, text)).abs().max() > 1e-2        # the adapter really changes the output
        assert torch.allclose(logits(merged_model, tokenizer, text), ours, atol=1e-5, rtol=0)
    merged_weights, base_weights = merged_model.state_dict(), base.state_dict()
    experts = [n for n in merged_weights if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    assert len(experts) == 2 * merged_model.config.num_hidden_layers
    for name in experts:  # every expert of every layer took its own update
        delta = (merged_weights[name] - base_weights[name]).abs().flatten(1).amax(dim=1)
        assert (delta > 1e-4).all(), name


def test_moe_gguf_has_the_experts_llama_cpp_reads(merged, tmp_path):
    """qwen3moe as llama.cpp's converter writes it: the fused gate_up_proj split into ffn_gate_exps (its first half of
    rows) and ffn_up_exps, ffn_down_exps, the router ffn_gate_inp (kept f32), the expert counts and width; the f32
    file reads back through transformers' GGUF loader with identical logits and greedy answers."""
    import gguf

    _, model, tokenizer = merged
    config = model.config
    path = write_gguf(model, tokenizer, tmp_path / "m-q8.gguf", "q8_0", None, [tokenizer.eos_token_id], "m",
                      progress=False)
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "qwen3moe"
    fields = {k: reader.fields[f"qwen3moe.{k}"].contents() for k in
              ("expert_count", "expert_used_count", "expert_feed_forward_length", "attention.key_length")}
    assert fields == {"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 16,
                      "attention.key_length": config.head_dim}
    tensors = {t.name: t for t in reader.tensors}
    assert not any("exps" not in name and ("experts" in name or "gate_up" in name) for name in tensors)
    hidden, width, experts = config.hidden_size, config.moe_intermediate_size, config.num_experts
    state = model.state_dict()
    for layer in range(config.num_hidden_layers):
        gate, up, down = (tensors[f"blk.{layer}.ffn_{k}_exps.weight"] for k in ("gate", "up", "down"))
        assert [list(t.shape) for t in (gate, up, down)] == [[hidden, width, experts]] * 2 + [[width, hidden, experts]]
        router = tensors[f"blk.{layer}.ffn_gate_inp.weight"]
        assert list(router.shape) == [hidden, experts] and router.tensor_type == gguf.GGMLQuantizationType.F32
        fused = state[f"model.layers.{layer}.mlp.experts.gate_up_proj"].numpy()
        for t, half in ((gate, fused[:, :width]), (up, fused[:, width:])):
            values = gguf.dequantize(t.data, t.tensor_type).reshape(half.shape)
            assert np.abs(values - half).max() < 0.02 * np.abs(half).max()   # q8_0 rounding, not the other half

    exact = write_gguf(model, tokenizer, tmp_path / "m-f32.gguf", "f32", None, [tokenizer.eos_token_id], "m",
                       progress=False)
    check = verify_gguf(exact, model, tokenizer, [tokenizer(t)["input_ids"] for t in TEXTS[:2]], TEXTS, "f32",
                        max_new_tokens=4)
    assert check.reader == "transformers" and check.tokenizer_same
    assert check.max_abs_logit_error < 1e-5 and check.greedy_same == check.prompts


def weighty_experts(kind: str, tokenizer, **overrides):
    """A tiny MoE whose experts and routers are 10x their init scale, so that they, not the residual stream, decide
    the logits (a wrong expert layout then shows as a logit error, not as rounding)."""
    model = build_model(kind, tokenizer, seed=1, **overrides).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "experts" in name or ".gate" in name:
                param.mul_(10)
    return model


@pytest.mark.parametrize("kind,arch,reader", [("qwen2_moe", "qwen2moe", "transformers"),
                                              ("mixtral", "llama", "the gguf reader")])
def test_other_moe_architectures_write_and_read_back(kind, arch, reader, tmp_path):
    """Qwen2-MoE (its shared expert as ffn_*_shexp, the shared expert's gate a vector) reads back through transformers;
    Mixtral (llama with experts, which transformers' GGUF loader does not read) through the gguf package's reader."""
    import gguf

    tokenizer = build_tokenizer()
    model = weighty_experts(kind, tokenizer)
    path = write_gguf(model, tokenizer, tmp_path / f"{kind}.gguf", "f32", None, [tokenizer.eos_token_id], kind,
                      progress=False)
    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    assert gguf.GGUFReader(str(path)).fields["general.architecture"].contents() == arch
    assert {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight",
            "blk.1.ffn_gate_inp.weight"} <= set(tensors)
    if kind == "qwen2_moe":
        assert list(tensors["blk.0.ffn_gate_inp_shexp.weight"].shape) == [model.config.hidden_size]
        assert list(tensors["blk.0.ffn_down_shexp.weight"].shape) == [model.config.shared_expert_intermediate_size,
                                                                       model.config.hidden_size]
    check = verify_gguf(path, model, tokenizer, [tokenizer(t)["input_ids"] for t in TEXTS[:2]], TEXTS, "f32",
                        max_new_tokens=4)
    assert check.reader == reader and check.tokenizer_same
    assert check.max_abs_logit_error < 1e-5 and check.greedy_same == check.prompts


def test_moe_gguf_read_back_catches_a_swapped_gate_and_up(tmp_path, monkeypatch):
    """The check is not blind to the experts: a file with the gate and up halves exchanged fails it."""
    import steadytune.infer.gguf_file as gguf_file

    written = gguf_file.expert_tensors

    def swapped(name, data, layer_name):
        out = written(name, data, layer_name)
        return [(out[0][0], out[1][1]), (out[1][0], out[0][1])] if out and len(out) == 2 else out

    tokenizer = build_tokenizer()
    model = weighty_experts("mixtral", tokenizer)
    monkeypatch.setattr(gguf_file, "expert_tensors", swapped)
    path = write_gguf(model, tokenizer, tmp_path / "bad.gguf", "f32", None, [], "bad", progress=False)
    monkeypatch.setattr(gguf_file, "expert_tensors", written)
    x = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    with torch.no_grad():
        error = (read_back(path, model, "LLAMA")(x).logits - model(x).logits).abs().max().item()
    assert error > 1e-2


@pytest.mark.parametrize("kind,overrides,message", [
    ("qwen3_moe", {}, "norm_topk_prob: false.*always renormalises"),
    ("qwen2_moe", {"norm_topk_prob": True}, "norm_topk_prob: true.*never renormalises"),
    ("qwen3_moe", {"norm_topk_prob": True, "mlp_only_layers": [0]}, "dense layers"),
    ("gpt_oss", {}, "gpt-oss .*not written by steadytune's GGUF writer.*merged Hugging Face folder"),
    ("deepseek_v2", {}, "DeepSeek-V2 .*not written by steadytune's GGUF writer.*convert_hf_to_gguf"),
])
def test_moe_gguf_refuses_in_one_line_what_llama_cpp_would_compute_otherwise(kind, overrides, message, tmp_path):
    tokenizer = build_tokenizer()
    model = build_model(kind, tokenizer, **overrides)
    with pytest.raises(UserError, match=message) as refused:
        write_gguf(model, tokenizer, tmp_path / "x.gguf", "f16", None, [], "x", progress=False)
    assert "\n" not in str(refused.value)
    assert not list(tmp_path.iterdir())   # nothing half-written


def test_llama_cpp_runs_the_moe_gguf_with_the_same_logits(merged, tmp_path):
    """llama.cpp itself (llama-cpp-python) loads qwen3moe, qwen2moe and Mixtral files and computes the logits
    transformers computes (measured: within 3e-4 on logits of about 0.5; a qwen3moe written with norm_topk_prob false,
    which llama.cpp renormalises anyway, is off by 7e-2)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

    _, trained, trained_tokenizer = merged
    tokenizer = build_tokenizer()
    models = [("qwen3_moe", trained, trained_tokenizer), ("qwen2_moe", weighty_experts("qwen2_moe", tokenizer), tokenizer),
              ("mixtral", weighty_experts("mixtral", tokenizer), tokenizer)]
    for kind, model, tok in models:
        path = write_gguf(model, tok, tmp_path / f"{kind}.gguf", "f32", None, [tok.eos_token_id], kind, progress=False)
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, logits_all=True)
        for text in TEXTS:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) == ids, (kind, text)
            llm.reset()
            llm.eval(ids)
            with torch.no_grad():
                reference = model(torch.tensor([ids])).logits[0].numpy()
            assert np.abs(np.array(llm.scores[:len(ids)]) - reference).max() < 2e-3, (kind, text)
        llm.close()


# --- chat, predict, serve -----------------------------------------------------------------------------------------

def test_serve_engine_answers_a_moe_adapter_and_its_base_as_generate(adapted):
    """The decode engine (slot cache, one adapter per batch: peft's mixed batches refuse expert LoRA) answers each
    request with the adapter or the base weights exactly as transformers' greedy `generate` does on the PeftModel."""
    model, tokenizer = adapted
    assert all(is_grouped(site.module) for site in expert_sites(model))   # the experts' grouped LoRA forward runs
    prompts = random_prompts(6, seed=5)
    adapters = ["default", None] * 3
    expected = [tokenizer.decode(generate_alone(model, p, 8, a or "base"), skip_special_tokens=True)
                for p, a in zip(prompts, adapters)]
    assert expected[0::2] != expected[1::2]   # the adapter answers otherwise than the base
    engine = BatchingEngine(model, tokenizer, max_batch=4)
    assert not engine.mixed_adapters
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    results = collect(engine, [(p, a, params) for p, a in zip(prompts, adapters)])
    assert [text for text, _ in results] == expected
    model.set_adapter("default")
    model.base_model.enable_adapter_layers()


def test_chat_and_predict_on_a_moe_run_answer_as_generate(moe_run, adapted):
    from steadytune.infer.chat import ChatSession
    from steadytune.infer.generate import conversation_ids, run_template, stop_token_ids
    from steadytune.infer.predict import predict_rows

    model, tokenizer = adapted
    run_ = open_run(str(moe_run["run"]), ["do_sample=false"])
    template = run_template(run_.cfg, tokenizer)
    questions = ["Give three tips for staying healthy.", "What is the capital of France?"]
    expected = []
    with torch.inference_mode():
        for question in questions:
            ids = conversation_ids(template, tokenizer, [{"role": "user", "content": question}])
            out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0,
                                 eos_token_id=stop_token_ids(template, tokenizer))
            expected.append(tokenizer.decode(out[0, len(ids):], skip_special_tokens=True))
    session = ChatSession.load(run_, quiet=True)
    assert "".join(session.answer(questions[0])) == expected[0]
    rows = [Row(f"row {i}", {"prompt": q}) for i, q in enumerate(questions)]
    assert [r["predict"] for r in predict_rows(run_, rows).rows] == expected


def test_two_expert_adapters_serve_on_one_base_or_are_refused_by_name(moe_run, adapted):
    """Two adapters of the same expert weights sit side by side on one base (each answers as when loaded alone);
    adapters of different expert weights cannot (peft nests one wrapper per adapted weight): refused, naming both."""
    run = moe_run["run"]
    config = json.loads((run / "adapter_config.json").read_text(encoding="utf-8"))
    weights = load_file(run / "adapter_model.safetensors")
    other = moe_run["root"] / "other"
    other.mkdir(exist_ok=True)
    (other / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({k: -v if "lora_B" in k else v for k, v in weights.items()}, other / "adapter_model.safetensors")

    loaded = load_served(str(run), [f"other={other}"], [])
    assert set(loaded.served) == {"run", "base", "other"}
    x = torch.tensor([random_prompts(1, seed=2)[0]])
    model = loaded.model
    with torch.inference_mode():
        model.set_adapter(loaded.served["run"].adapter)
        ours = model(x).logits
        model.set_adapter(loaded.served["other"].adapter)
        theirs = model(x).logits
        alone = adapted[0](x).logits
    assert torch.allclose(ours, alone, atol=1e-5) and (theirs - ours).abs().max() > 1e-2

    narrow = moe_run["root"] / "narrow"
    narrow.mkdir(exist_ok=True)
    (narrow / "adapter_config.json").write_text(json.dumps({**config, "target_parameters": ["experts.down_proj"]}),
                                                encoding="utf-8")
    save_file({k: v for k, v in weights.items() if "gate_up_proj" not in k and "base_layer" not in k},
              narrow / "adapter_model.safetensors")
    with pytest.raises(UserError, match="adapts experts.down_proj but .* adapts experts.down_proj, "
                                        "experts.gate_up_proj: peft serves several expert adapters"):
        load_served(str(run), [f"narrow={narrow}"], [])


def test_gpt_oss_loads_for_inference_with_eager_attention(tmp_path):
    """gpt-oss's attention sinks run only eagerly in transformers: chat / predict / serve / export load it so, as
    training does, instead of failing on SDPA."""
    folder = save_tiny_model(tmp_path / "oss", "gpt_oss")
    model, _, _, description = load_for_inference(load_config(None, [f"model_name_or_path={folder}"]),
                                                   device=torch.device("cpu"), dtype=torch.float32)
    assert model.config._attn_implementation == "eager" and "attention eager" in description


@pytest.mark.parametrize("batch", ["slots", "slots+graphs"])
def test_gpt_oss_decodes_in_the_slot_cache_as_generate(batch):
    """Eager attention adds its mask to the scores: the slot cache hands it 0 / lowest-value masks, not the bool
    masks SDPA takes (which eager attention added as 0 / 1: wrong tokens from the first step). Prompts longer than
    the tiny config's 8-token window, rows joining and leaving."""
    tokenizer = build_tokenizer()
    model = build_model("gpt_oss", tokenizer, seed=1).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("sinks"):
                param.normal_()
    prompts = random_prompts(6, seed=5)
    budgets = [12, 9, 6] * 2
    expected = [generate_alone(model, p, n) for p, n in zip(prompts, budgets)]
    assert run_staggered(model, prompts, budgets, batch=batch) == expected


def test_vllm_is_refused_for_an_expert_adapter_before_it_starts(moe_run):
    """vLLM cannot load LoRA on the fused experts (vllm#41384, #52198): serve and predict with infer_backend: vllm
    say so and offer the merged export, whether or not vLLM is installed."""
    from steadytune.infer.predict import predict_rows

    with pytest.raises(UserError, match=r"vLLM cannot load .*#41384.*steadytune export RUN export_dir"):
        load_served(str(moe_run["run"]), [], ["infer_backend=vllm"])
    with pytest.raises(UserError, match=r"vLLM cannot load"):
        predict_rows(open_run(str(moe_run["run"]), ["infer_backend=vllm"]), [Row("row 0", {"prompt": "hi"})])
