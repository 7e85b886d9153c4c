"""The MoE experts' grouped forward with LoRA (model/moe/experts_lora.py) on a GPU, before any timing of whole runs:

1. correctness on a small Qwen3-MoE layer in bf16 (hidden 256, 16 experts of width 128, 4 a token, LoRA r 16 with
   non-zero B): the experts' output and the LoRA factors' gradients through torch's grouped matmul, our Triton kernel
   and the per-expert loop, each against the per-expert loop in fp32 (max absolute and relative differences);
2. time at the Qwen3-30B-A3B layer size (16,384 tokens x top-8 of 128 experts, hidden 2048, width 768):
   one grouped matmul of gate_up's shape (x [tokens x 8, 2048] @ w [128, 2048, 1536]), forward + input gradient
   (the base is frozen), torch against triton; then the whole experts module with LoRA, forward + backward, on
   torch, triton, and peft's own parametrized forward (what the plain bench arm runs) for scale.

    python benchmarks/moe_grouped_check.py [--tokens 16384] [--output moe_grouped_check.json]
    python benchmarks/moe_grouped_check.py --device cpu --tokens 256     # a smoke run: torch and loop only
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from steadytune.bench.arms import bench_run_config
from steadytune.model.lora import attach_adapter
from steadytune.model.moe.anatomy import expert_sites
from steadytune.model.moe.grouped import TRITON, group_ends, grouped_mm
from steadytune.model.moe.experts_lora import is_grouped
from steadytune.model.shapes import build_shape
from steadytune.model.tiny import build_model

SMALL = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_experts=16, num_experts_per_tok=4,
             num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=64)


def experts_with_lora(model: torch.nn.Module, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """`model` with steadytune's LoRA (r 16, lora_target all), lora_B non-zero; -> (peft model, its first experts
    site: the outermost peft wrapper of layer 0's experts)."""
    model = attach_adapter(model, bench_run_config(argparse.Namespace(moe_grouped_mm="auto")))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.05)
    model.to(device=device)
    for name, param in model.named_parameters():
        if not param.requires_grad:
            param.data = param.data.to(dtype)
    return model, expert_sites(model)[0]


def routed(tokens: int, hidden: int, experts: int, top_k: int, device: torch.device, dtype: torch.dtype,
           seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs of an experts module: hidden [tokens, hidden], each token's top_k experts and their weights."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g).to(device, dtype)
    logits = torch.randn(tokens, experts, generator=g)
    weights, index = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
    return x, index.to(device), (weights / weights.sum(-1, keepdim=True)).to(device, dtype)


def run_site(site, backend: str, x, index, weights):
    """The experts' output and the LoRA factors' gradients with the grouped forward on `backend`."""
    site.module.grouped_backend = backend
    x = x.detach().requires_grad_(True)
    out = site.module(x, index, weights)
    out.float().square().mean().backward()
    grads = {n: p.grad.detach().float().clone() for n, p in site.module.named_parameters() if p.grad is not None}
    site.module.zero_grad(set_to_none=True)
    return out.detach().float(), grads, x.grad.detach().float()


def check(device: torch.device, backends: list[str]) -> dict:
    """Each backend in bf16 against the per-expert loop in fp32, on the small layer."""
    config = {**SMALL}
    ref_model, ref_site = experts_with_lora(build_model("qwen3_moe", **config), device, torch.float32)
    x, index, weights = routed(512, config["hidden_size"], config["num_experts"], config["num_experts_per_tok"],
                               device, torch.float32)
    ref_out, ref_grads, ref_dx = run_site(ref_site, "loop", x, index, weights)
    model, site = experts_with_lora(build_model("qwen3_moe", **config), device, torch.bfloat16)
    assert is_grouped(site.module), "the grouped forward is not installed"
    reference = dict(ref_model.named_parameters())
    with torch.no_grad():   # the same weights as the reference, to the bf16 rounding of the frozen ones
        for name, param in model.named_parameters():
            param.copy_(reference[name])
    results = {}
    for backend in backends:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out, grads, dx = run_site(site, backend, x.to(torch.bfloat16), index, weights.to(torch.bfloat16))
        rel = lambda a, b: float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))  # noqa: E731
        results[backend] = {
            "output_max_abs": float((out - ref_out).abs().max()), "output_max_rel": rel(out, ref_out),
            "input_grad_max_rel": rel(dx, ref_dx),
            "lora_grad_max_rel": {name.split("lora_")[-1].replace(".default.weight", "") + " of " +
                                  ("down_proj" if "down_proj" in name else "gate_up_proj"): rel(grads[name], ref_grads[name])
                                  for name in ref_grads},
        }
        worst = max(results[backend]["lora_grad_max_rel"].values())
        print(f"  {backend:7s} vs fp32 loop: output max abs {results[backend]['output_max_abs']:.3e} "
              f"(rel {results[backend]['output_max_rel']:.3e}), input grad rel {results[backend]['input_grad_max_rel']:.3e}, "
              f"LoRA grads worst rel {worst:.3e}", flush=True)
    return results


def timed(fn, device: torch.device, reps: int = 10, warmup: int = 3) -> float:
    """Milliseconds a call (CUDA events on a GPU, the wall clock on a CPU), after warm-up calls."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) * 1000 / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def time_grouped(tokens: int, device: torch.device, backends: list[str]) -> dict:
    """One grouped matmul of gate_up's shape at 30B-A3B's sizes, forward + input gradient."""
    experts, top_k, hidden, width = 128, 8, 2048, 768
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    _, index, _ = routed(tokens, hidden, experts, top_k, device, dtype)
    rows = tokens * top_k
    sorted_experts, _ = torch.sort(index.reshape(-1), stable=True)
    ends = group_ends(sorted_experts, experts)
    x = (torch.randn(rows, hidden, device=device) * 0.1).to(dtype).requires_grad_(True)
    w = (torch.randn(experts, 2 * width, hidden, device=device) * 0.02).to(dtype).transpose(-2, -1)  # [E, H, 2I]
    dy = torch.randn(rows, 2 * width, device=device).to(dtype)
    flops = 2 * rows * hidden * 2 * width * 2     # forward and the input gradient
    results = {}
    for backend in backends:
        def step():
            out = grouped_mm(x, w, ends, backend)
            (dx,) = torch.autograd.grad(out, x, dy)
            return dx
        ms = timed(step, device)
        results[backend] = {"ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1)}
        print(f"  grouped matmul [{rows:,} x {hidden}] @ [{experts}, {hidden}, {2 * width}] forward + dx on {backend}: "
              f"{ms:.2f} ms, {flops / ms / 1e9:.0f} TFLOP/s", flush=True)
    return results


def time_experts(tokens: int, device: torch.device, backends: list[str]) -> dict:
    """The 30B-A3B shape's first experts module with LoRA (one layer built on the device), forward + backward."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    base = build_shape("qwen3-30b-a3b", dtype=dtype, device=device, num_layers=1)
    model, site = experts_with_lora(base, device, dtype)
    x, index, weights = routed(tokens, 2048, 128, 8, device, dtype)
    x.requires_grad_(True)
    results = {}
    for backend in backends + ["peft"]:
        def step():
            if backend == "peft":   # the plain arm's path: peft's parametrized forward on transformers' experts
                out = type(site.module).forward(site.module, x, index, weights)
            else:
                site.module.grouped_backend = backend
                out = site.module(x, index, weights)
            out.backward(torch.ones_like(out))
            site.module.zero_grad(set_to_none=True)
            x.grad = None
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                ms = timed(step, device, reps=5, warmup=2)
        except torch.OutOfMemoryError as e:
            results[backend] = {"error": f"out of memory: {str(e).splitlines()[0]}"}
            print(f"  experts with LoRA on {backend}: out of memory", flush=True)
            continue
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        results[backend] = {"ms": round(ms, 3), "peak_memory_gib": round(peak, 2) if peak else None}
        print(f"  experts with LoRA, {tokens:,} tokens x top-8, forward + backward on {backend}: {ms:.2f} ms"
              + (f" (peak {peak:.1f} GiB)" if peak else ""), flush=True)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384, help="tokens of the timed layer (each goes to 8 experts)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--output", default="moe_grouped_check.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    backends = ["torch"] + (["triton"] if device.type == "cuda" and TRITON else [])
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "tokens": args.tokens}
    print("correctness: small Qwen3-MoE layer (16 experts, top-4), bf16 against the fp32 loop", flush=True)
    report["check"] = check(device, backends + ["loop"])
    print(f"time: the 30B-A3B experts layer, {args.tokens:,} tokens", flush=True)
    report["grouped_mm"] = time_grouped(args.tokens, device, backends)
    report["experts_lora"] = time_experts(args.tokens, device, backends)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
