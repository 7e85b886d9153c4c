"""benchmarks/dpo_vs_trl.py on CPU with a tiny shape: both arms run on the same pairs, batches and adapter, and
their per-step losses agree (the GPU run of the same script is what measures speed and memory)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import load_benchmark

pytest.importorskip("trl", reason="the comparison needs TRL (pip install 'steadytune[compare]')")


def test_dpo_against_trl_on_the_same_pairs_gives_the_same_losses(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": f"Question {i}: name a colour" + " please" * (i % 5)}],
             "chosen": {"from": "gpt", "value": "Blue, like the sky" + " and the sea" * (i % 3)},
             "rejected": {"from": "gpt", "value": f"I refuse {i}" + " again" * (i % 4)}} for i in range(40)]
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    out = tmp_path / "report.json"
    report = load_benchmark("dpo_vs_trl").main(["--shape", "tiny", "--dataset", str(data), "--steps", "3", "--warmup", "1",
                                 "--max-tokens", "400", "--cutoff-len", "96", "--vocab", "600",
                                 "--learning-rate", "1e-3", "--workdir", str(tmp_path / "work"),
                                 "--output", str(out)])
    assert json.loads(out.read_text(encoding="utf-8"))["steps"] == 3
    ours, theirs = report["steadytune"]["losses"], report["trl"]["losses"]
    assert len(ours) == len(theirs) == 3
    assert ours[0] == pytest.approx(math.log(2), abs=1e-4) and theirs[0] == pytest.approx(math.log(2), abs=1e-4)
    # Same pairs, same start, same update: the curves agree to TRL's logging precision (4 decimals) and drift only
    # by arithmetic order.
    assert ours == pytest.approx(theirs, abs=2e-3)
    assert report["speedup"] > 0 and all(n > 0 for n in report["real_tokens_per_step"])
