"""QLoRA of a mixture of experts on one GPU: the peak memory of the Qwen3-30B-A3B shape with 4-bit experts.

    python benchmarks/moe_qlora_peak.py --out /root/moe_qlora        # H200: r 8 at 2,048 and 8,192 tokens, r 4 at 2,048
    python benchmarks/moe_qlora_peak.py --runs 8:2048 --out /root/m  # one run
    python benchmarks/moe_qlora_peak.py --shape tiny-moe --runs 4:64 --steps 3 --out /tmp/m   # CPU smoke run

The issue's target: the 30B-A3B shape's QLoRA peaks at <= 20 GiB at 2k-token steps (a 24 GB card fits it).

The model: the shape's config (hidden 2048, 48 layers, 32 heads / 4 KV heads, head_dim 128, 128 experts top-8, expert
width 768, vocabulary 151,936, untied head) with random weights, built straight into the 4-bit base `train` loads with
quantization_bit: 4 (model/moe/quantized_load.build_four_bit_model: module by module on the GPU, each quantised before
the next, so the 61 GB of bf16 weights are never there and no folder of them is written): nf4 with double
quantisation, bf16 compute, every linear layer but the head as bitsandbytes' Linear4bit, the fused routed experts in
the same 4-bit format, dequantised one projection at a time in the grouped forward. Speed and memory do not depend on
the weights' values. Then `steadytune train` itself (run_training with the built model): stage pt on random words cut
into blocks of exactly T tokens (one block a micro-batch), LoRA r on every linear layer and every expert
(lora_target: all), AdamW, gradient checkpointing on (what a 24 GB card's policy picks at these lengths: printed), and
activation offloading where that policy would turn it on for a 24 GiB card.

Each run in its own process (a clean peak). Per run: the peak memory allocated and reserved while building the model
(loading) and while training (torch.cuda.max_memory_*), what steadytune's estimate said (memory_estimate), tokens/s over
the steps after the first two, the last loss. Printed as a table and written to --out/moe_qlora_peak.json. One command,
about two minutes on an H200.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The shape as the issue gives it (the published Qwen3-30B-A3B config); model/shapes.py's entry is used when present.
SHAPES = {
    "qwen3-30b-a3b": dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                          moe_intermediate_size=768, intermediate_size=6144, vocab_size=151936,
                          max_position_embeddings=40960, rope_theta=1000000.0, tie_word_embeddings=False),
    # CPU smoke: widths that are multiples of bitsandbytes' block of 64
    "tiny-moe": dict(model_type="qwen3_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=64, intermediate_size=128, vocab_size=1024,
                     max_position_embeddings=4096, tie_word_embeddings=False),
}
DEFAULT_RUNS = "8:2048,8:8192,4:2048"   # LoRA rank : tokens a step
CARD_GIB = 24.0          # the card the target is about; the checkpointing and offloading decisions are made for it
TARGET_GIB = 20.0
LR, WARMUP_STEPS = 2e-4, 2
WORDS = ("the experts of a mixture each read the tokens routed to them while four bit weights are decoded one "
         "layer at a time before every grouped matmul and the adapters learn 判断 这个 商品 质量 物流 满意").split()


def shape_config(shape: str):
    from transformers import AutoConfig

    from steadytune.model.shapes import SHAPES as KNOWN

    spec = dict(KNOWN.get(shape) or SHAPES[shape])
    return AutoConfig.for_model(spec.pop("model_type"), **spec)


def make_model_folder(shape: str, folder: Path) -> Path:
    """config.json and a small tokenizer (no weights: the model is built from the config in each run)."""
    from steadytune.model.tiny import build_chat_tokenizer

    if not (folder / "config.json").is_file():
        shape_config(shape).save_pretrained(folder)
        build_chat_tokenizer("bytelevel").save_pretrained(folder)
    return folder


def make_text(folder: Path, tokens: int, steps: int) -> Path:
    """A pt dataset of random words, long enough for `steps` blocks of `tokens` tokens."""
    path = folder / f"text_{tokens}_{steps}.jsonl"
    if not path.is_file():
        rng = random.Random(0)
        words = 2 * tokens * steps   # ~1.5 tokens a word with the small tokenizer: twice what is needed
        rows = [{"text": " ".join(rng.choice(WORDS) for _ in range(2000))} for _ in range(math.ceil(words / 2000))]
        path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return path


def peak(device: str) -> dict:
    if device != "cuda":
        return {"allocated_gib": None, "reserved_gib": None}
    return {"allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}


def card_policy(config, model, rank: int, tokens: int, compute_bytes: float) -> dict:
    """What train's policy decides for a CARD_GIB card with this model held (hardware/memory.py)."""
    from steadytune.hardware.memory import (
        choose_activation_offloading,
        choose_gradient_checkpointing,
        dequantised_experts_gib,
        held_gib,
        lora_parameters,
    )

    state = (held_gib([*model.parameters(), *model.buffers()]) + lora_parameters(config, rank) * 16 / 2**30
             + dequantised_experts_gib(config, compute_bytes))
    checkpointing, why = choose_gradient_checkpointing(config, tokens, CARD_GIB, state_gib=state)
    offloading, offload_why = choose_activation_offloading(config, tokens, CARD_GIB, True, state)
    return {"state_gib": round(state, 2), "gradient_checkpointing": checkpointing, "checkpointing_why": why,
            "activation_offloading": offloading, "offloading_why": offload_why}


def run_one(shape: str, model_dir: Path, work: Path, rank: int, tokens: int, steps: int, device: str) -> dict:
    """Build the 4-bit model, train `steps` steps of `tokens` tokens with LoRA rank `rank`; -> the row."""
    from steadytune.config import load_config
    from steadytune.model.moe.quantized_load import build_four_bit_model
    from steadytune.train import run_training
    from steadytune.training.monitor import read_metrics

    config = shape_config(shape)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    model = build_four_bit_model(config, torch.device(device), dtype)
    built = {"build_s": round(time.perf_counter() - started, 1), "load": peak(device)}
    policy = card_policy(config, model, rank, tokens, 2.0 if device == "cuda" else 4.0)
    print(f"[r {rank} {tokens}] built in {built['build_s']} s, loading peak {built['load']}; for a {CARD_GIB:g} GiB "
          f"card: gradient checkpointing {policy['checkpointing_why']}; activation offloading "
          f"{policy['offloading_why']}", flush=True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out = work / f"run-r{rank}-{tokens}"
    keys = {"model_name_or_path": str(model_dir), "stage": "pt", "dataset": str(make_text(work, tokens, steps)),
            "cutoff_len": tokens, "per_device_train_batch_size": 1, "max_steps": steps, "learning_rate": LR,
            "lora_rank": rank, "lora_alpha": 2 * rank, "lora_target": "all", "logging_steps": 1,
            "save_steps": 100000, "seed": 0, "output_dir": str(out), "overwrite_output_dir": True,
            "report_to": "none", "packing": False, "bf16": device == "cuda", "lr_scheduler_type": "constant",
            "quantization_bit": 4, "gradient_checkpointing": True,
            "activation_offloading": policy["activation_offloading"] and device == "cuda"}
    cfg = load_config(None, keys)
    started = time.perf_counter()
    result = run_training(cfg, progress=False, model=model)
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "input_tokens_per_s" in r]
    rates = [r["input_tokens_per_s"] for r in rows if r["step"] > WARMUP_STEPS] or [result.input_tokens_per_s]
    decisions = cfg.decisions
    return {"rank": rank, "tokens": tokens, "train": peak(device), **built, "steps": result.global_step,
            "train_s": round(time.perf_counter() - started, 1),
            "tokens_per_s": round(len(rates) / sum(1.0 / r for r in rates)) if all(rates) else None,
            "loss": round(result.losses[-1], 4), "estimate": decisions.get("memory_estimate", {}).get("value"),
            "estimate_parts": decisions.get("memory_estimate", {}).get("reason"),
            "trainable": result.model is not None and sum(p.numel() for p in result.model.parameters()
                                                          if p.requires_grad),
            "activation_offloading": keys["activation_offloading"], "policy_for_24gib": policy}


def table(rows: list[dict]) -> str:
    lines = [f"{'rank':>4} {'tokens':>6} {'peak alloc':>10} {'peak resv':>9} {'<= 20 GiB':>9} {'load peak':>9} "
             f"{'estimate':>9} {'tokens/s':>8} {'loss':>7}  notes"]
    for r in rows:
        train, load = r.get("train") or {}, r.get("load") or {}
        alloc = train.get("allocated_gib")
        fits = "-" if alloc is None else ("yes" if alloc <= TARGET_GIB else "no")
        note = r.get("error") or ("offloading on" if r.get("activation_offloading") else "")
        lines.append(f"{r.get('rank', '-'):>4} {r.get('tokens', '-'):>6} {alloc or '-':>10} "
                     f"{train.get('reserved_gib') or '-':>9} {fits:>9} {load.get('allocated_gib') or '-':>9} "
                     f"{r.get('estimate') or '-':>9} {r.get('tokens_per_s') or '-':>8} {r.get('loss') or '-':>7}  "
                     f"{note}")
    return "\n".join(lines)


def parse_runs(text: str) -> list[tuple[int, int]]:
    return [(int(rank), int(tokens)) for rank, tokens in (item.split(":") for item in text.split(",") if item)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-30b-a3b", help=f"one of {', '.join(SHAPES)} (tiny-moe: CPU smoke)")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="comma list of LoRA rank:tokens a step")
    parser.add_argument("--steps", type=int, default=4, help="steps a run (the first 2 are warm-up)")
    parser.add_argument("--out", type=Path, default=Path("saves/moe_qlora_peak"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)   # rank:tokens: one run in this process, its row written
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = make_model_folder(args.shape, args.out / f"model-{args.shape}")
    if args.worker:
        [(rank, tokens)] = parse_runs(args.worker)
        try:
            row = run_one(args.shape, model_dir, args.out, rank, tokens, args.steps, device)
        except torch.OutOfMemoryError as e:   # a run that does not fit is a result, not a crash of the table
            row = {"rank": rank, "tokens": tokens, "error": f"out of memory: {str(e).splitlines()[0][:160]}",
                   "train": peak(device)}
        print(f"[r {rank} {tokens}] " + json.dumps(row), flush=True)
        (args.out / f"row-r{rank}-{tokens}.json").write_text(json.dumps(row), encoding="utf-8")
        return 0
    rows: list[dict] = []
    started = time.perf_counter()
    for rank, tokens in parse_runs(args.runs):   # each in its own process: its peak is its own
        worker = [sys.executable, __file__, "--worker", f"{rank}:{tokens}", "--shape", args.shape,
                  "--steps", str(args.steps), "--out", str(args.out)]
        if subprocess.run(worker).returncode != 0:
            rows.append({"rank": rank, "tokens": tokens, "error": "the run's process failed (its output is above)"})
            continue
        rows.append(json.loads((args.out / f"row-r{rank}-{tokens}.json").read_text(encoding="utf-8")))
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    report = {"shape": args.shape, "device": name, "steps": args.steps, "target_gib": TARGET_GIB, "rows": rows,
              "seconds": round(time.perf_counter() - started), "torch": torch.__version__,
              "bitsandbytes": _version("bitsandbytes"), "peft": _version("peft"),
              "transformers": _version("transformers")}
    (args.out / "moe_qlora_peak.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"\n{args.shape} QLoRA (4-bit nf4 experts and linear layers, double quantisation, bf16 compute) on {name}; "
          f"LoRA on every linear layer and every expert; gradient checkpointing; {args.steps} steps a run; "
          f"bitsandbytes {report['bitsandbytes']}; {report['seconds']} s in all")
    print(table(rows))
    print(f"written: {args.out / 'moe_qlora_peak.json'}")
    return 0


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
