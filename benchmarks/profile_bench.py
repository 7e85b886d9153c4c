"""Where the time of `bench`'s steadytune arm goes on a GPU, kernel by kernel: for deciding what to make faster
next (issue 17's MFU target).

The arm is set up exactly as `steadytune bench` sets it up (steadytune_setup: the policy's static shapes, compiled
layers, checkpointing), except that CUDA graphs are off so that every kernel is launched, and seen, one by one
(graphs change launch cost, not the kernels); the loss head is still the graphed run's (ours, not liger's).
After --warmup untimed steps, --profile-steps steps run under torch.profiler. Printed:
- wall time per step and the share of it the GPU was busy;
- GPU time by kind of kernel (matrix multiplies, attention, compiled Triton code, eager elementwise, optimizer, ...);
- the matrix multiplies by input shape, with the TFLOP/s each reached (against the GPU's dense bf16 peak);
- the busiest kernels.

Usage (GPU): python benchmarks/profile_bench.py --shape qwen2.5-1.5b [--max-tokens 16384] [any bench flag]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from steadytune.bench.command import add_arguments, resolve_device  # noqa: E402
from steadytune.bench.arms import examples_for, step_groups, steadytune_setup, train_steps  # noqa: E402
from steadytune.bench.workload import peak_flops, synchronize  # noqa: E402
from steadytune.training.loss import no_host_sync  # noqa: E402

KINDS = (  # first match wins; names as CUDA kernels are called on an H200 with torch 2.11
    ("matmul", r"gemm|cutlass|nvjet|xmma|sm90_|sm80_|cublas|splitk"),
    ("attention", r"flash|fmha|attention"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("compiled (triton)", r"^triton_"),
    ("copy / cast", r"copy|memcpy|memset|cast|fill"),
    ("reduction", r"reduce|norm|softmax|logsumexp|cross_entropy|nll"),
    ("eager elementwise", r"elementwise|vectorized|unrolled|index|scatter|gather|cat"),
)


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    args.cuda_graphs = "off"
    device = resolve_device(args.device)
    if args.max_tokens is None:
        args.max_tokens = 16384 if device.type == "cuda" else 1024
    examples = examples_for(args)
    groups = step_groups(examples, args.max_tokens, args.warmup + args.profile_steps)
    model, collate, plan, settings = steadytune_setup(args, device, groups, examples)
    for key in ("static_shapes", "torch_compile", "use_liger_kernel", "gradient_checkpointing"):
        print(f"{key}: {settings[key]['value']}  ({settings[key]['reason']})")
    # The loss head as a graphed run has it: ours, not liger's fused cross-entropy (which reads a count back, so a
    # graph cannot hold it and train's graphed micro-batches never run it), though graphs are off here.
    with no_host_sync():
        train_steps(model, collate, examples, groups[:args.warmup], device, 0, None, graphs=False, settings=settings)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        timed = groups[args.warmup:]
        synchronize(device)
        with profile(activities=activities, record_shapes=True) as prof:
            started = time.perf_counter()
            train_steps(model, collate, examples, timed, device, 0, None, graphs=False, settings=settings)
            synchronize(device)
            wall = time.perf_counter() - started
    tokens = sum(len(examples[i]["input_ids"]) for g in timed for i in g)
    steps = len(timed)

    kernels: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name][0] += event.device_time_total / 1e6
            kernels[event.name][1] += 1
    busy = sum(t for t, _ in kernels.values())
    print(f"\n{steps} steps, {tokens:,} real tokens, wall {wall / steps * 1e3:.1f} ms a step, "
          f"{tokens / wall:,.0f} tokens/s; GPU busy {busy / wall:.1%} of the wall time")
    by_kind: dict[str, float] = defaultdict(float)
    for name, (seconds, _) in kernels.items():
        by_kind[kind_of(name)] += seconds
    print("\nGPU time by kind of kernel (ms a step, share of GPU time):")
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<20} {seconds / steps * 1e3:8.1f} ms  {seconds / busy:6.1%}")

    peak = peak_flops(device)
    print("\nmatrix multiplies by input shape (ms a step, calls a step, TFLOP/s reached):")
    rows = []
    for avg in prof.key_averages(group_by_input_shape=True):
        if avg.key not in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_mm"):
            continue
        shapes = [s for s in avg.input_shapes if s]
        cuda_s = getattr(avg, "device_time_total", 0.0) / 1e6
        flops = _mm_flops(avg.key, shapes) * avg.count
        rows.append((cuda_s, avg.key, shapes, avg.count, flops))
    for cuda_s, key, shapes, count, flops in sorted(rows, key=lambda r: -r[0])[:args.top]:
        rate = flops / cuda_s / 1e12 if cuda_s else 0.0
        of_peak = f" ({rate * 1e12 / peak:.0%} of peak)" if peak and rate else ""
        print(f"  {cuda_s / steps * 1e3:7.2f} ms  {count // steps:4d}x  {key:<11} {str(shapes):<48} "
              f"{rate:6.1f}{of_peak}")

    print(f"\nbusiest {args.top} kernels (ms a step, launches a step, kind):")
    for name, (seconds, count) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {seconds / steps * 1e3:7.2f} ms  {count // steps:5d}x  {kind_of(name):<18} {name[:110]}")
    return 0


def _mm_flops(key: str, shapes: list) -> float:
    """2·m·n·k of one call from the profiler's recorded input shapes (0 where they do not say)."""
    try:
        if key == "aten::addmm":
            shapes = shapes[1:3]
        if key == "aten::bmm":
            (b, m, k), (_, _, n) = shapes[0], shapes[1]
            return 2.0 * b * m * n * k
        (m, k), (_, n) = shapes[0], shapes[1]
        return 2.0 * m * n * k
    except (ValueError, IndexError, TypeError):
        return 0.0


if __name__ == "__main__":
    sys.exit(main())
