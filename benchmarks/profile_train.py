"""Where a `steadytune train` step's time goes on a GPU: the whole run under torch.profiler, then the busiest
kernels and how much of the training wall time the GPU was actually busy (low = the CPU launching kernels is
the limit, so fewer/fused kernels help; high = the math is the limit, so bigger or faster kernels help).

Usage: python benchmarks/profile_train.py [CONFIG] [key=value ...]   (default CONFIG: the demo recipe)
Keep max_steps small (e.g. 20): profiling records every op.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from steadytune.config import load_config
from steadytune.demo import recipe_path
from steadytune.train import run_training


def main(argv: list[str]) -> None:
    config = argv[0] if argv and "=" not in argv[0] else str(recipe_path())
    overrides = [a for a in argv if "=" in a]
    cfg = load_config(config, overrides)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        result = run_training(cfg, force=True, progress=False)
        wall = time.perf_counter() - started
    events = prof.key_averages()
    device_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    launches = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    print(events.table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=70))
    steps = max(result.global_step, 1)
    print(f"training loop: {result.train_seconds:.2f} s for {steps} steps = {1e3 * result.train_seconds / steps:.1f} ms"
          f"/step (whole run incl. loading {wall:.1f} s); GPU kernel time over the whole run {device_us / 1e6:.2f} s "
          f"= {device_us / 1e3 / steps:.1f} ms/step, {launches / steps:.0f} kernels/step; GPU busy "
          f"{100 * device_us / 1e6 / max(result.train_seconds, 1e-9):.0f}% of the training loop")


if __name__ == "__main__":
    main(sys.argv[1:])
