"""`steadytune bench` runs end to end on CPU and writes what it prints; its length model matches the tokenizer's."""

from __future__ import annotations

import json
import statistics

import pytest

from conftest import LF_FIXTURES, needs_shared
from steadytune import bench
from steadytune.cli import main


def test_packaged_lengths_follow_the_alpaca_demo_sets():
    lengths = sorted(p + a for p, a in bench.dataset_lengths(None))
    # The Qwen tokenizer gives mean 187, p90 383, max 752 on these two files (DEVICE.md).
    assert statistics.mean(lengths) == pytest.approx(187, rel=0.05)
    assert lengths[int(0.9 * len(lengths))] == pytest.approx(383, rel=0.05)
    assert max(lengths) == pytest.approx(752, rel=0.05)


@needs_shared
def test_packaged_lengths_are_those_of_the_real_demo_files():
    data = LF_FIXTURES / "data"
    real = bench.dataset_lengths(f"{data / 'alpaca_en_demo.json'},{data / 'alpaca_zh_demo.json'}")
    assert real == bench.dataset_lengths(None)


def test_mfu_counts_4n_plus_6n_lora():
    assert bench.flops_per_token(100, 10) == 460


def test_bench_cli_runs_on_cpu_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(["bench", "--shape", "tiny", "--device", "cpu", "--arms", "plain,steadytune", "--steps", "2",
                 "--warmup", "1", "--examples", "120", "--plain-batch", "2", "--max-tokens", "512",
                 "--check-loss", "2", "--output", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    printed = capsys.readouterr().out
    for arm in ("plain", "steadytune"):
        result = report["arms"][arm]
        assert result["real_tokens"] > 0 and result["tokens_per_s"] > 0
        assert f"{result['tokens_per_s']:,.0f}" in printed
    assert report["ratios"]["tokens_per_s"] == pytest.approx(
        report["arms"]["steadytune"]["tokens_per_s"] / report["arms"]["plain"]["tokens_per_s"])
    assert report["arms"]["steadytune"]["settings"]["packing_attention"]["value"] == "sdpa"
    assert report["loss_check"]["max_relative_difference"] < 1e-4


def test_bad_dataset_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text("[{\"instruction\": \"hi\"}]")
    code = main(["bench", "--shape", "tiny", "--device", "cpu", "--dataset", str(bad), "--output",
                 str(tmp_path / "b.json")])
    assert code == 1
    assert "record 0 has no 'output'" in capsys.readouterr().err


def test_unknown_shape_is_a_clear_error(capsys):
    assert main(["bench", "--shape", "gpt-17", "--device", "cpu"]) == 1
    assert "unknown --shape 'gpt-17'" in capsys.readouterr().err


def test_mfu_peak_comes_from_the_product_table():
    """bench's MFU denominator is hardware.py's table (dense bf16, per device as torch sees it)."""
    from steadytune.hardware import peak_bf16_tflops
    assert peak_bf16_tflops("NVIDIA H200") == peak_bf16_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert peak_bf16_tflops("AMD Instinct MI300X") == 1307.4
    assert peak_bf16_tflops("AMD Instinct MI250X") == 191.5          # one GCD: torch sees half a card
    assert peak_bf16_tflops("NVIDIA GeForce RTX 4090") == 165.2
    assert peak_bf16_tflops("NVIDIA L4") is None                     # unknown peak: MFU is reported as n/a
