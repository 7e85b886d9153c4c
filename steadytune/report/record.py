"""What `train` records for the report, and the report it writes at the end of a run.

- data_stats.json (at set-up): the length histogram of the training examples, how many were truncated or
  dropped, and how much of the computed token slots hold real tokens (packing efficiency).
- report.html (at the end): `write_run_report`, which never fails the run it reports on.
The run's status, command and process come from training/run_folder.py's manifest and lock.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from steadytune.data.packing import pack_into_rows

MAX_BINS = 50


def write_data_stats(output_dir: str | Path, data, micro_batches: Sequence[Sequence[int]],
                     packing_attention: str | None, row_len: int) -> None:
    """data_stats.json into output_dir (main process only: train calls it there)."""
    path = Path(output_dir) / "data_stats.json"
    path.write_text(json.dumps(data_stats(data, micro_batches, packing_attention, row_len), indent=1,
                               ensure_ascii=False, default=str), encoding="utf-8")


def data_stats(data, micro_batches: Sequence[Sequence[int]], packing_attention: str | None, row_len: int) -> dict:
    train_lengths = [len(x["input_ids"]) for x in data.train]
    stats = data.stats or {}
    out = {
        "cutoff_len": row_len,
        "train": length_summary(train_lengths),
        "eval": length_summary([len(x["input_ids"]) for x in data.eval]) if data.eval else None,
        "truncated": stats.get("truncated", 0),
        "truncation": stats.get("truncation", {}),   # per split: examples cut, prompt and answer tokens lost
        "dropped": stats.get("dropped", {}),
        "rows_read": stats.get("rows_read", {}),
        "trained_tokens": stats.get("trained_tokens"),
        "warnings": stats.get("warnings", []),
        "label_names": data.label_names,
        "class_counts": getattr(data, "class_counts", None) or {},
        "batching": batching_efficiency(train_lengths, micro_batches, packing_attention, row_len),
    }
    return out


def length_summary(lengths: Sequence[int]) -> dict | None:
    if not lengths:
        return None
    values = np.asarray(lengths)
    edges = np.histogram_bin_edges(values, bins="auto")
    if len(edges) - 1 > MAX_BINS:
        edges = np.linspace(values.min(), values.max(), MAX_BINS + 1)
    counts, edges = np.histogram(values, bins=edges)
    return {"examples": int(values.size), "tokens": int(values.sum()), "mean": round(float(values.mean()), 1),
            "p50": int(np.percentile(values, 50)), "p90": int(np.percentile(values, 90)), "max": int(values.max()),
            "histogram": {"edges": [round(float(e), 2) for e in edges], "counts": [int(c) for c in counts]}}


def batching_efficiency(lengths: Sequence[int], micro_batches: Sequence[Sequence[int]],
                        packing_attention: str | None, row_len: int) -> dict:
    """Real tokens over the token slots the model computes, for one epoch's micro-batches as train cuts them:
    padded batches pad every example to the longest; packed rows (sdpa/flex) pad every row to the fullest;
    varlen packing computes exactly the real tokens."""

    real = computed = 0
    for group in micro_batches:
        sizes = [int(lengths[i]) for i in group]
        if not sizes:
            continue
        real += sum(sizes)
        if packing_attention is None:
            computed += len(sizes) * max(sizes)
        elif packing_attention == "varlen":
            computed += sum(sizes)
        else:
            rows = pack_into_rows(sizes, row_len)
            computed += len(rows) * max(sum(sizes[i] for i in row) for row in rows)
    mode = "padded" if packing_attention is None else f"packed ({packing_attention})"
    return {"mode": mode, "micro_batches": len(micro_batches), "real_tokens": real, "computed_tokens": computed,
            "efficiency": round(real / computed, 4) if computed else None}


def write_run_report(output_dir: str | Path, announce: bool = True) -> Path | None:
    """report.html into output_dir at the end of a run (main process only). The report is a view of files
    already saved, so a failure here is printed and never fails the run. announce=False: a rewrite (with results
    added) of a report already announced."""
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    path = Path(output_dir) / "report.html"
    try:
        # imported here, inside the try: a broken plotly or jinja2 must not fail a run that has finished
        from steadytune.report.page import write_report
        write_report([output_dir], path)
    except Exception as e:  # noqa: BLE001 - any failure of a view must not cost the user a finished run
        print(f"warning: report.html not written ({type(e).__name__}: {e}); "
              f"try `steadytune report {output_dir}`", file=sys.stderr)
        return None
    if announce:
        print(f"report: {path}", flush=True)
    return path
