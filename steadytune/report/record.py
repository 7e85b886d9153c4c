"""What `train` records for the report, and the report it writes at the end of a run.

- run_info.json (at start): the command, the process id and host (so `steadytune report` can tell a run that
  is still going from one that was killed), and the start time.
- data_stats.json (at start): the length histogram of the training examples, how many were truncated or
  dropped, and how much of the computed token slots hold real tokens (packing efficiency).
- report.html (at the end): `write_run_report`, which never fails the run it reports on.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

MAX_BINS = 50


def record_run_start(output_dir: str | Path, data, micro_batches: Sequence[Sequence[int]],
                     packing_attention: str | None, row_len: int) -> None:
    """Write run_info.json and data_stats.json into output_dir (main process only: train calls it there)."""
    output_dir = Path(output_dir)
    info = {"argv": list(sys.argv), "command": command_line(sys.argv), "pid": os.getpid(),
            "host": socket.gethostname(), "cwd": os.getcwd(), "started": time.time(),
            "started_iso": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    _write_json(output_dir / "run_info.json", info)
    _write_json(output_dir / "data_stats.json", data_stats(data, micro_batches, packing_attention, row_len))


def command_line(argv: Sequence[str]) -> str:
    """The command as the user typed it, as far as it can be told: `steadytune train ...`."""
    first = Path(argv[0]).name if argv else ""
    rest = " ".join(_quote(a) for a in argv[1:])
    if first in ("__main__.py", "steadytune"):
        return f"steadytune {rest}".strip()
    return f"{first} {rest}".strip()


def _quote(arg: str) -> str:
    import shlex
    return shlex.quote(arg)


def data_stats(data, micro_batches: Sequence[Sequence[int]], packing_attention: str | None, row_len: int) -> dict:
    train_lengths = [len(x["input_ids"]) for x in data.train]
    stats = data.stats or {}
    out = {
        "cutoff_len": row_len,
        "train": length_summary(train_lengths),
        "eval": length_summary([len(x["input_ids"]) for x in data.eval]) if data.eval else None,
        "truncated": stats.get("truncated", 0),
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
    from steadytune.packing import pack_into_rows

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


def write_run_report(output_dir: str | Path) -> Path | None:
    """report.html into output_dir at the end of a run (main process only). The report is a view of files
    already saved, so a failure here is printed and never fails the run."""
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    path = Path(output_dir) / "report.html"
    try:
        from steadytune.report.page import write_report
        write_report([output_dir], path)
    except Exception as e:  # noqa: BLE001 - any failure of a view must not cost the user a finished run
        print(f"warning: report.html not written ({type(e).__name__}: {e}); "
              f"try `steadytune report {output_dir}`", file=sys.stderr)
        return None
    print(f"report: {path}", flush=True)
    return path


def _write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
