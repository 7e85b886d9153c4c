"""One long sequence on one GPU: the Qwen2.5-7B shape (Qwen2.5-7B-Instruct-1M's widths and window) with LoRA r 16 on
every linear layer, trained with the long-context plan (training/long_context.py: tiled layers, final norm and loss,
and as many layer inputs in host memory as the plan chooses or --host-layers says), a few optimizer steps on one
random row of --tokens tokens (every token labelled, as stage pt), timed and measured: tokens/s, peak allocated memory
against the plan's estimate, the attention kernel the tiles use.

    python benchmarks/longctx_bench.py --tokens 1000000 --layers 2 --host-layers 1 --out r.json

--layers cuts the depth (each layer's memory and time are the same; a full-depth step at 1M tokens takes most of an
hour on one H200, so benchmarks/gpu_longctx.sh runs the full depth at a shorter length and the full length at a
shorter depth). The estimate for the full model at --tokens is written beside (plan_full).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from steadytune.bench.workload import with_lora
from steadytune.config import load_config
from steadytune.hardware.long_context import describe_levers, fewest_host_layers, lora_run_state_gib, tiled_estimate
from steadytune.hardware.memory import held_gib
from steadytune.hardware.unified_memory import system_memory_gib
from steadytune.model.anatomy import text_config
from steadytune.model.offload import offload_activations, remove_offloading
from steadytune.model.shapes import build_shape, shape_config
from steadytune.model.tiling import attach_tiling, tiling_of
from steadytune.training.long_context import kernel_blocker, plan_long_context
from steadytune.training.loss import causal_lm_loss_sum

WINDOW_1M = 1_010_000   # Qwen2.5-7B-Instruct-1M's max_position_embeddings (same widths as Qwen2.5-7B)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the shape's 28)")
    parser.add_argument("--host-layers", default="plan", help="layer inputs in host memory: plan, or a number")
    parser.add_argument("--tile", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps; the first one warms up")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script (no memory figures)")
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    budget = torch.cuda.get_device_properties(device).total_memory / 2**30 if gpu else 80.0
    ram = system_memory_gib()
    full_config = _config(None)
    full_state = lora_run_state_gib(full_config, 16)
    plan_full = fewest_host_layers(full_config, args.tokens, full_state, budget, ram, args.tile)
    result = {"tokens": args.tokens, "gpu": torch.cuda.get_device_name(device) if gpu else "cpu",
              "gpu_gib": round(budget, 1),
              "ram_gib": ram, "tile": args.tile, "torch": torch.__version__,
              "levers_full_model": describe_levers(full_config, full_state, budget, ram, args.tile),
              "plan_full": None if plan_full is None else {"gpu_gib": round(plan_full.gpu_gib, 2),
                                                           "host_layers": plan_full.host_layers,
                                                           "host_gib": round(plan_full.host_gib, 1),
                                                           "parts": plan_full.describe()}}
    started = time.perf_counter()
    model = with_lora(build_shape("qwen2.5-7b", dtype=torch.bfloat16, device=device, num_layers=args.layers))
    model.config.max_position_embeddings = WINDOW_1M
    result["build_s"] = round(time.perf_counter() - started, 1)
    config = text_config(model)
    cfg = load_config(None, ["sequence_tiling=true", f"sequence_tile_tokens={args.tile}", "lora_rank=16",
                             f"cutoff_len={args.tokens}"])
    state = held_gib(model.parameters()) + held_gib(model.buffers())
    if args.host_layers == "plan":
        long = plan_long_context(cfg, model, args.tokens, budget, state, fsdp=False)
        estimate, host = long.estimate, long.host_layers
    else:   # a forced split: tiling, and the lowest `host` layers' inputs in host memory
        blocker = kernel_blocker(model)
        if blocker:
            raise SystemExit(f"no tiled run here: {blocker}")
        host = int(args.host_layers)
        attach_tiling(model, tile=args.tile, min_tokens=args.tile)
        lora = 3 * held_gib(p for p in model.parameters() if p.requires_grad)
        estimate = tiled_estimate(config, args.tokens, state + lora, args.tile, host)
        if host:
            x_bytes = args.tokens * config.hidden_size * 2
            rotary = args.tokens * config.hidden_size // config.num_attention_heads * 2   # cos (or sin)
            offload_activations(model, device, max_bytes=host * x_bytes + 2 * rotary if host < config.num_hidden_layers
                                else None)
    result.update(layers=config.num_hidden_layers, host_layers=host, kernel=tiling_of(model).kernel_name,
                  estimate_gib=round(estimate.gpu_gib, 2), estimate=estimate.describe(),
                  decisions={k: v for k, v in cfg.decisions.items() if k in ("sequence_tiling", "activation_offloading",
                                                                             "memory_estimate", "long_context")})
    print(json.dumps({k: result[k] for k in ("gpu", "tokens", "layers", "host_layers", "kernel", "estimate")}),
          flush=True)
    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (1, args.tokens), device=device)
    batch = {"input_ids": ids, "labels": ids}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, fused=gpu)
    model.train()
    sync = torch.cuda.synchronize if gpu else (lambda device: None)
    peak_of = (lambda: torch.cuda.max_memory_allocated(device) / 2**30) if gpu else (lambda: 0.0)
    if gpu:
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for _ in range(args.steps):
        sync(device)
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss_sum, n = causal_lm_loss_sum(model, batch)
        (loss_sum / n).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - start)
        losses.append(loss_sum.item() / n)
        print(f"step {len(times)}: {times[-1]:.1f} s, loss {losses[-1]:.4f}, peak {peak_of():.1f} GiB", flush=True)
    peak = peak_of() or float("nan")
    step = times[-1]
    offloaded = remove_offloading(model)
    result.update(step_s=[round(t, 2) for t in times], losses=[round(v, 4) for v in losses],
                  tokens_per_s=round(args.tokens / step, 1), peak_allocated_gib=round(peak, 2),
                  peak_reserved_gib=round(torch.cuda.max_memory_reserved(device) / 2**30, 2) if gpu else None,
                  estimate_over_peak=round(estimate.gpu_gib / peak, 3),
                  host_gib_moved=None if offloaded is None else round(offloaded, 2))
    if args.layers:   # what the full depth would take at this length: every layer costs the same
        full = shape_config("qwen2.5-7b", None)["num_hidden_layers"]
        result["full_depth_step_s_extrapolated"] = round(step * full / config.num_hidden_layers, 1)
        result["full_depth_tokens_per_s_extrapolated"] = round(args.tokens / result["full_depth_step_s_extrapolated"],
                                                               1)
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(result, indent=2), flush=True)


def _config(layers: int | None):
    from transformers import AutoConfig

    spec = shape_config("qwen2.5-7b", layers)
    return AutoConfig.for_model(spec.pop("model_type"), **spec)


if __name__ == "__main__":
    main()
