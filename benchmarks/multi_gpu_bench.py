"""Helpers of benchmarks/multi_gpu_session.sh (one call on two GPUs): write the inputs, run the plain transformers
recipe on one or several GPUs, and summarise every run into one table.

    python benchmarks/multi_gpu_bench.py prepare WORK        tokenizer, synthetic alpaca data, the 1.5B shape, tiny model,
                                                             ZeRO-3 file (the 7B shape: `prepare-7b WORK`, on the CPU)
    python benchmarks/multi_gpu_bench.py plain WORK NAME     the plain recipe (HF Trainer + peft, batch 8 per GPU, padded)
                                                             on one GPU, or on several under torchrun
    python benchmarks/multi_gpu_bench.py summary WORK OUT    tokens/s, speed-ups, per-step loss parity, MFU, peak memory

Models are built from config with random weights (steadytune/model/shapes.py): speed and memory do not depend on the values.
The data are random token ids decoded by a small BPE tokenizer, with the prompt/answer lengths of LLaMA-Factory's
alpaca demo sets (steadytune/bench/lengths.json), so steps hold realistic lengths.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLES = 5000        # ~945k tokens: 57 steps of 2 x 8,192, so 50 steps stay in one epoch
PLAIN_STEPS, PLAIN_WARMUP = 40, 10
# MULTI_GPU_SMOKE=1: the whole session on a CPU with tiny shapes (gloo processes), to check the script itself.
SMOKE = os.environ.get("MULTI_GPU_SMOKE") == "1"
SHAPE_15B, SHAPE_7B = ("tiny", "tiny") if SMOKE else ("qwen2.5-1.5b", "qwen2.5-7b")
DEVICE = "cpu" if SMOKE else "cuda"


def prepare(work: Path) -> None:
    from steadytune.model.shapes import build_shape
    from steadytune.model.tiny import build_tokenizer, save_tiny_model

    work.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    started = time.time()
    write_data(work / "data", tokenizer, 400 if SMOKE else EXAMPLES)
    save_tiny_model(work / "tiny", "qwen2")
    write_deepspeed_config(work / "ds_z3.json")
    write_configs(work)
    model = build_shape(SHAPE_15B, dtype=torch.bfloat16, device=DEVICE)
    save_model(model, tokenizer, work / "qwen15b")
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(f"prepared {work} in {time.time() - started:.0f} s", flush=True)


def prepare_7b(work: Path) -> None:
    """The 7B shape on the CPU (meta -> empty -> random fill), so the GPUs stay free for the runs meanwhile."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from steadytune.model.shapes import SHAPES
    from steadytune.model.tiny import build_tokenizer

    started = time.time()
    spec = dict(SHAPES[SHAPE_7B])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = model.to_empty(device="cpu")
    model.tie_weights()   # to_empty gives tied weights (an embedding used as the head) two storages
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:   # norms 1, biases 0
                p.fill_(1.0 if "norm" in name else 0.0)
            else:
                p.normal_(0.0, 0.02, generator=generator)
    save_model(model, build_tokenizer(), work / "qwen7b")
    print(f"prepared the 7B shape in {time.time() - started:.0f} s", flush=True)


def save_model(model, tokenizer, folder: Path) -> None:
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="5GB")
    tokenizer.save_pretrained(folder)


def write_data(folder: Path, tokenizer, count: int) -> None:
    from steadytune.bench.workload import dataset_lengths
    lengths = dataset_lengths(None)
    rng = random.Random(0)
    low, high = 20, len(tokenizer) - 1   # past the special tokens
    rows = []
    for i in range(count):
        prompt, answer = lengths[rng.randrange(len(lengths))]
        rows.append({"instruction": tokenizer.decode([rng.randint(low, high) for _ in range(max(1, prompt - 16))]),
                     "input": "", "output": tokenizer.decode([rng.randint(low, high) for _ in range(max(1, answer - 4))])})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "synthetic.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps({"synthetic": {"file_name": "synthetic.json"}}),
                                              encoding="utf-8")


def write_configs(work: Path) -> None:
    """base.yaml (the 1.5B LoRA runs; the session script adds each run's keys) and hang.yaml (the watchdog test)."""
    import yaml
    base = {"model_name_or_path": str(work / "qwen15b"), "dataset": "synthetic", "dataset_dir": str(work / "data"),
            "template": "qwen", "cutoff_len": 2048, "packing": True, "max_tokens_per_batch": 8192, "lora_rank": 16,
            "lora_target": "all", "learning_rate": 1.0e-4, "warmup_steps": 5, "max_steps": 50, "logging_steps": 1,
            "save_steps": 100000, "seed": 7, "bf16": True, "gradient_checkpointing": False,
            "overwrite_output_dir": True}
    if SMOKE:
        base.update(max_tokens_per_batch=512, cutoff_len=256, max_steps=6)
    (work / "base.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    hang = {**base, "model_name_or_path": str(work / "tiny"), "max_tokens_per_batch": 1024, "cutoff_len": 256,
            "max_steps": 20, "save_steps": 2, "hang_timeout": 15,
            "fault_injection": {"hang_step": 3, "hang_rank": 1}}
    (work / "hang.yaml").write_text(yaml.safe_dump(hang), encoding="utf-8")


def write_deepspeed_config(path: Path) -> None:
    """ZeRO-3 with the "auto" values users' files carry (seed 001's settings, without its misspelled key)."""
    path.write_text(json.dumps({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, "sub_group_size": 1e9,
                              "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                              "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                              "stage3_gather_16bit_weights_on_model_save": True},
    }, indent=2), encoding="utf-8")


def plain(work: Path, name: str) -> None:
    """bench's plain arm (HF Trainer + peft, batch 8, padded); under torchrun every rank trains its share (the
    Trainer's DDP) and rank 0 writes the sum of the ranks' rates. A fixed number of timed steps after a warm-up
    (the first steps of this recipe are slow: steadytune/bench/steady.py)."""
    from steadytune.bench.arms import run_plain

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if SMOKE:
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    args = argparse.Namespace(shape=SHAPE_15B, dataset=None, examples=1600 * world, cutoff_len=256 if SMOKE else 2048,
                              plain_batch=8, warmup=1 if SMOKE else PLAIN_WARMUP, steps=2 if SMOKE else PLAIN_STEPS,
                              window=1 if SMOKE else 10, min_steps=1, min_tokens=0, tolerance=0.03, max_seconds=120.0,
                              max_steps=1000)
    result = run_plain(args, device)
    rate = torch.tensor([float(result["tokens_per_s"])], device=device)
    if world > 1:
        import torch.distributed as dist
        dist.all_reduce(rate)
    if rank == 0:
        out = work / "runs" / name
        out.mkdir(parents=True, exist_ok=True)
        (out / "plain.json").write_text(json.dumps({"gpus": world, "tokens_per_s": float(rate[0]),
                                                    "per_rank": result["tokens_per_s"], "timed_steps": result["steps"],
                                                    "peak_memory_gib": result["peak_memory_gib"],
                                                    "mfu": (result["mfu"] or 0) or None}), encoding="utf-8")
        print(f"plain on {world} GPU(s): {float(rate[0]):,.0f} tokens/s", flush=True)


# ---------------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------------

def read_run(folder: Path) -> dict | None:
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():
        return None
    steps = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()]
    steps = [r for r in steps if "loss" in r and "event" not in r]
    results = json.loads((folder / "train_results.json").read_text()) if (folder / "train_results.json").is_file() else {}
    rates = [r["tokens_per_s"] for r in steps[5:] if r.get("tokens_per_s")]
    return {"losses": [r["loss"] for r in steps], "tokens_per_s": statistics.median(rates) if rates else None,
            "torch_peak_gib": max((r.get("mem_peak_gib") or 0) for r in steps) if steps else None,
            "total_params": results.get("total_params"), "trainable_params": results.get("trainable_params"),
            "status": results.get("status", "no train_results.json")}


def smi_peaks(path: Path) -> dict[int, float]:
    peaks: dict[int, float] = {}
    if not path.is_file():
        return peaks
    for row in csv.reader(path.read_text().splitlines()):
        try:
            index, used = int(row[0]), float(row[1])
        except (ValueError, IndexError):
            continue
        peaks[index] = max(peaks.get(index, 0.0), used / 1024)
    return peaks


def parity(a: list[float], b: list[float]) -> dict | None:
    n = min(len(a), len(b))
    if n == 0:
        return None
    rel = [abs(x - y) / abs(x) for x, y in zip(a[:n], b[:n])]
    return {"steps": n, "max_relative": max(rel), "mean_relative": sum(rel) / n, "within_1pct": max(rel) < 0.01}


def mfu(run: dict, gpus: int, peak_tflops: float | None, full: bool) -> float | None:
    from steadytune.bench.workload import flops_per_token
    if not run or not run["tokens_per_s"] or not peak_tflops or not run["total_params"]:
        return None
    trainable, total = run["trainable_params"], run["total_params"]
    per_token = 6.0 * total if full else flops_per_token(total - trainable, trainable)
    return run["tokens_per_s"] * per_token / (peak_tflops * 1e12 * gpus)


def summary(work: Path, out: Path) -> None:
    from steadytune.hardware.policy import peak_bf16_tflops

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    peak = peak_bf16_tflops(name)
    runs = {d.name: read_run(d) for d in sorted((work / "runs").iterdir())
            if d.is_dir() and d.name != "hang"} if (work / "runs").is_dir() else {}
    timings = {}   # the session script's lines: name, exit code, seconds, visible GPUs
    if (work / "timings.tsv").is_file():
        for line in (work / "timings.tsv").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                timings[parts[0]] = {"exit": int(parts[1]), "seconds": int(parts[2]), "gpus": parts[3]}
    report: dict = {"device": name, "peak_bf16_tflops": peak, "runs": {}, "pairs": {}, "timings": timings}
    for key, run in runs.items():
        if run is None:
            plain_file = work / "runs" / key / "plain.json"
            report["runs"][key] = json.loads(plain_file.read_text()) if plain_file.is_file() else {"status": "missing"}
            continue
        gpus = 2 if key.endswith("2") else 1
        report["runs"][key] = {k: v for k, v in run.items() if k != "losses"} | {
            "gpus": gpus, "steps": len(run["losses"]), "mfu": mfu(run, gpus, peak, full="full" in key),
            "smi_peak_gib_per_gpu": {i: v for i, v in smi_peaks(work / f"smi_{key}.csv").items()
                                     if str(i) in timings.get(key, {}).get("gpus", "0,1").split(",")}}
    for kind in ("ddp", "z3", "fsdp", "plain"):
        one, two = report["runs"].get(f"{kind}1"), report["runs"].get(f"{kind}2")
        if not one or not two or not one.get("tokens_per_s") or not two.get("tokens_per_s"):
            continue
        pair = {"speedup": two["tokens_per_s"] / one["tokens_per_s"]}
        if runs.get(f"{kind}1") and runs.get(f"{kind}2"):
            pair["loss_parity"] = parity(runs[f"{kind}1"]["losses"], runs[f"{kind}2"]["losses"])
        report["pairs"][kind] = pair
    hang = work / "hang.json"
    if hang.is_file():
        report["hang"] = json.loads(hang.read_text())
    out.mkdir(parents=True, exist_ok=True)
    (out / "multi_gpu_results.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    lines = [f"device: {name} (dense bf16 peak {peak} TFLOP/s)", "",
             "| run | GPUs | tokens/s | MFU | peak GiB/GPU (nvidia-smi) | torch peak GiB (rank 0) | status |",
             "|---|---|---|---|---|---|---|"]
    for key, r in report["runs"].items():
        smi = r.get("smi_peak_gib_per_gpu") or {}
        lines.append(f"| {key} | {r.get('gpus', '?')} | {r.get('tokens_per_s') or 0:,.0f} | "
                     f"{(100 * r['mfu']) if r.get('mfu') else 0:.1f}% | "
                     f"{', '.join(f'{v:.1f}' for _, v in sorted(smi.items())) or '-'} | "
                     f"{r.get('torch_peak_gib') or r.get('peak_memory_gib') or '-'} | {r.get('status', '')} |")
    lines += ["", "| pair | 2-GPU / 1-GPU tokens/s | per-step loss 1 vs 2 GPUs (max / mean relative) |", "|---|---|---|"]
    for kind, pair in report["pairs"].items():
        p = pair.get("loss_parity")
        lines.append(f"| {kind} | {pair['speedup']:.2f}x | "
                     + (f"{p['max_relative']:.2e} / {p['mean_relative']:.2e} over {p['steps']} steps" if p else "-") + " |")
    if "hang" in report:
        lines += ["", f"hang test: {json.dumps(report['hang'])}"]
    if timings:
        lines += ["", "pieces (exit code, seconds): " + ", ".join(f"{k} ({v['exit']}, {v['seconds']} s)"
                                                              for k, v in timings.items())]
    text = "\n".join(lines)
    (out / "multi_gpu_results.md").write_text(text + "\n", encoding="utf-8")
    print(text, flush=True)


def main() -> None:
    command, work = sys.argv[1], Path(sys.argv[2])
    if command == "prepare":
        prepare(work)
    elif command == "prepare-7b":
        prepare_7b(work)
    elif command == "plain":
        plain(work, sys.argv[3])
    elif command == "summary":
        summary(work, Path(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
