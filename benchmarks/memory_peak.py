"""What was alive on the GPU at the peak of a run: reads a snapshot written by torch.cuda.memory._dump_snapshot
(bench writes one with STEADYTUNE_MEMORY_HISTORY=path) and prints the live memory at the highest point of the
allocation trace, grouped by the first frames of steadytune (or torch) code that allocated it.

    python benchmarks/memory_peak.py snapshot.pickle [--top 25]
"""

from __future__ import annotations

import argparse
import pickle
from collections import defaultdict


def where(frames: list[dict], depth: int = 2) -> str:
    """The first `depth` frames in steadytune's own code (else the innermost Python frames)."""
    ours = [f for f in frames if "steadytune" in f["filename"] and "memory_peak" not in f["filename"]]
    chosen = (ours or [f for f in frames if f["filename"].endswith(".py")])[:depth]
    return " <- ".join(f"{f['filename'].split('/')[-1]}:{f['line']} {f['name']}" for f in chosen) or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("snapshot")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with open(args.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    # memory alive when the trace starts: the blocks allocated in the segments, minus what the trace frees first
    live: dict[int, tuple[int, str]] = {}
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                live[block["address"]] = (block["size"], where(block.get("frames", [])) or "before the trace")
    events = [e for trace in snapshot["device_traces"] for e in trace]
    # replay backwards from the end state to find the state at the trace's start, then forwards to the peak
    for e in reversed(events):
        if e["action"] == "alloc":
            live.pop(e["addr"], None)
        elif e["action"] == "free_completed":
            live[e["addr"]] = (e["size"], where(e.get("frames", [])))
    total = sum(size for size, _ in live.values())
    peak, peak_live = total, dict(live)
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], where(e.get("frames", [])))
            total += e["size"]
            if total > peak:
                peak, peak_live = total, dict(live)
        elif e["action"] == "free_completed" and e["addr"] in live:
            total -= live.pop(e["addr"])[0]
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for size, origin in peak_live.values():
        groups[origin][0] += size
        groups[origin][1] += 1
    print(f"peak {peak / 2**30:.2f} GiB live in {len(peak_live)} blocks; the largest sources:")
    for origin, (size, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {size / 2**30:7.3f} GiB  {count:5d} blocks  {origin}")


if __name__ == "__main__":
    main()
