"""benchmarks/grpo_rl2.py (what benchmarks/gpu_rl2.sh runs on the GPU) on a CPU with tiny shapes: the models are
prepared, an asynchronous arm runs and reports its steps, rewards, staleness and path, and the summary puts the
ratios issue 68 asks for side by side (the synchronous arm's numbers made up here: only the arithmetic is tested)."""

from __future__ import annotations

import json

from conftest import load_benchmark

from steadytune.stages.rollout_ahead import ASYNC_ENV


def test_the_rl2_benchmark_runs_its_arms_and_sums_them_up(tmp_path, monkeypatch):
    bench = load_benchmark("grpo_rl2")
    work = tmp_path / "work"
    bench.main(["prepare", "--workdir", str(work), "--shape", "tiny", "--moe-shape", "moe-tiny", "--moe-layers", "2"])
    assert (work / "model_dense" / "config.json").is_file() and (work / "model_moe" / "config.json").is_file()
    small = ["--steps", "3", "--warmup", "1", "--prompts", "2", "--generations", "4", "--completion-length", "6"]
    monkeypatch.setenv(ASYNC_ENV, "on")   # the GPU's default path, here on a CPU
    ahead = tmp_path / "rl2_async.json"
    bench.main(["steadytune", "--workdir", str(work), "--name", "async", *small, "--set", "async_staleness=1",
                "--output", str(ahead)])
    run = json.loads(ahead.read_text())
    assert run["rollouts"] == "asynchronous" and run["staleness"] == [0.0, 1.0, 1.0]
    assert len(run["step_seconds"]) == 3 and run["steps_per_s"] > 0 and len(run["reward"]) == 3
    sync = dict(run, name="sync", rollouts="synchronous", steps_per_s=run["steps_per_s"] / 2, staleness=[0.0] * 3)
    (tmp_path / "rl2_sync.json").write_text(json.dumps(sync))
    text = bench.summary([str(ahead), str(tmp_path / "rl2_sync.json"), str(work / "rows.json")])
    assert "async / sync (issue 68 asks >= 1.3x): 2.00x steps/s" in text and "reward by step, async" in text
