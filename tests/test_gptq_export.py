"""GPTQ export (export_quantization_bit): the request checks, LLaMA-Factory's calibration windows, and a real
quantisation by GPTQModel on the CPU (skipped where GPTQModel is not installed; see infer/gptq_export.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from steadytune.cli import main
from steadytune.errors import UserError
from steadytune.infer.gptq_export import calibration_samples, check_gptq_request, read_texts
from steadytune.model.tiny import build_tokenizer, save_tiny_model

HAS_GPTQMODEL = importlib.util.find_spec("gptqmodel") is not None
WORDS = "the quick brown fox jumps over a lazy dog while seven tired cats sleep in warm grass".split()


def text_file(folder, rows=12, words=60):
    path = folder / "calibration.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))}) + "\n"
                            for i in range(rows)), encoding="utf-8")
    return path


def export_yaml(folder, model):
    """A merge_lora-style file with no adapter: the base itself is exported (LLaMA-Factory's qwen3_gptq.yaml)."""
    path = folder / "export.yaml"
    path.write_text(f"model_name_or_path: {model}\ntemplate: qwen\n", encoding="utf-8")
    return path


def test_request_checks_name_the_key():
    with pytest.raises(UserError, match="export_quantization_bit: 5; GPTQ quantises to 2, 3, 4 or 8 bits"):
        check_gptq_request(5, "c4.jsonl")
    with pytest.raises(UserError, match="needs export_quantization_dataset"):
        check_gptq_request(4, None)
    if not HAS_GPTQMODEL:
        with pytest.raises(UserError, match=r"needs GPTQModel, which is not installed: pip install 'steadytune\[gptq\]'"):
            check_gptq_request(4, "c4.jsonl")


def test_calibration_windows_are_llamafactorys(tmp_path):
    tokenizer = build_tokenizer()
    texts = read_texts(str(text_file(tmp_path)))
    samples = calibration_samples(tokenizer, texts, nsamples=5, maxlen=16)
    assert len(samples) == 5
    for s in samples:
        assert len(s["input_ids"]) == 16 and s["attention_mask"] == [1] * 16
        # each window is a run of consecutive tokens of one row
        assert any(_contains(tokenizer(t)["input_ids"], s["input_ids"]) for t in texts)
    assert calibration_samples(tokenizer, texts, 5, 16) == samples   # seeded: the same export twice
    with pytest.raises(UserError, match="export_quantization_maxlen: 10000: no row of the calibration data"):
        calibration_samples(tokenizer, texts, 1, 10_000)


def _contains(ids: list[int], window: list[int]) -> bool:
    return any(ids[i:i + len(window)] == window for i in range(len(ids) - len(window) + 1))


def test_gptq_keys_are_checked_before_anything_loads(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model", "qwen2")
    assert main(["export", str(export_yaml(tmp_path, model)), f"export_dir={tmp_path / 'out'}",
                 "export_quantization_bit=4", f"export_quantization_dataset={text_file(tmp_path)}",
                 "export_format=gguf"]) != 0
    assert "export_quantization_bit (GPTQ) and export_format: gguf: choose one" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not HAS_GPTQMODEL, reason="GPTQModel is not installed (BUILD_CUDA_EXT=0 pip install "
                    "--no-build-isolation 'gptqmodel==5.8.0' on a CPU machine): GPTQ export is tested on its checks")
def test_gptq_export_quantises_the_merged_model_and_loads_it_back(tmp_path, capsys):
    # GPTQ's groups of 128 input features (its CPU kernel needs whole groups): a stand-in 128 and 256 wide
    model = save_tiny_model(tmp_path / "model", "qwen2", hidden_size=128, intermediate_size=256,
                            num_attention_heads=2, num_key_value_heads=2)
    out = tmp_path / "gptq"
    assert main(["export", str(export_yaml(tmp_path, model)), f"export_dir={out}", "export_quantization_bit=4", f"export_quantization_dataset={text_file(tmp_path, words=80)}",
                 "export_quantization_nsamples=4", "export_quantization_maxlen=32"]) == 0
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    q = config["quantization_config"]
    assert (q["bits"], q["group_size"], q["desc_act"], q["sym"]) == (4, 128, False, True)
    said = capsys.readouterr().out
    assert "quantised: GPTQ 4-bit (GPTQModel; group size 128, 4 calibration samples)" in said
    agreement = float(said.split("same next token as the merged model at ")[1].split("%")[0])
    assert agreement >= 50   # 4-bit weights of a random model: most next-token choices survive
    assert not (out / ".gptq").exists() and (out / "tokenizer_config.json").is_file()
