"""Times the frozen base's fp8 matmul with a scale per row (what fp8_base does) against one scale per tensor, and
bf16, at one model shape's matmuls (forward and input gradient), on a CUDA GPU. Prints a table.

    python benchmarks/fp8_scaling_speed.py --hidden 1536 --intermediate 8960 --kv 256 --tokens 16384
"""

from __future__ import annotations

import argparse

import torch

FP8 = torch.float8_e4m3fn


def timed(fn, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--intermediate", type=int, default=8960)
    parser.add_argument("--kv", type=int, default=256, help="width of k_proj / v_proj")
    parser.add_argument("--tokens", type=int, default=16384)
    args = parser.parse_args()
    h, i, kv, t = args.hidden, args.intermediate, args.kv, args.tokens
    shapes = {"q/o fwd": (t, h, h), "k/v fwd": (t, h, kv), "qkv merged fwd": (t, h, h + 2 * kv),
              "gate/up fwd": (t, h, i), "gate+up merged fwd": (t, h, 2 * i), "down fwd": (t, i, h),
              "q/o bwd": (t, h, h), "k/v bwd": (t, kv, h), "qkv merged bwd": (t, h + 2 * kv, h),
              "gate/up bwd": (t, i, h), "gate+up merged bwd": (t, 2 * i, h), "down bwd": (t, h, i)}
    print(f"{'matmul':22s} {'M,K,N':>20s} {'bf16 ms':>8s} {'row ms':>8s} {'tensor ms':>9s} {'row TF/s':>9s} {'tensor TF/s':>11s}")
    total = {"bf16": 0.0, "row": 0.0, "tensor": 0.0}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        aq, wq = a.to(FP8), w.to(FP8)
        rs_a = torch.ones(m, 1, device="cuda")
        rs_w = torch.ones(1, n, device="cuda")
        one = torch.ones((), device="cuda")
        bf = timed(lambda: a @ w.t())
        row = timed(lambda: torch._scaled_mm(aq, wq.t(), scale_a=rs_a, scale_b=rs_w, out_dtype=torch.bfloat16,
                                             use_fast_accum=True))
        ten = timed(lambda: torch._scaled_mm(aq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                             use_fast_accum=True))
        flops = 2 * m * k * n
        if "merged" not in name:
            for key, ms in (("bf16", bf), ("row", row), ("tensor", ten)):
                total[key] += ms * (2 if name.startswith(("k/v", "q/o", "gate/up")) else 1)
        print(f"{name:22s} {f'{m},{k},{n}':>20s} {bf:8.3f} {row:8.3f} {ten:9.3f} {flops / row / 1e9:9.0f} "
              f"{flops / ten / 1e9:11.0f}")
    print("one layer's base matmuls, unmerged (ms):", {k: round(v, 3) for k, v in total.items()})


if __name__ == "__main__":
    main()
