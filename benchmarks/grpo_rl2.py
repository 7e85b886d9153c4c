"""Issue 68's GPU measurements of stage grpo, one arm per process (benchmarks/gpu_rl2.sh runs them, each under a
time limit, so one arm that runs long or fails leaves the others' results):

- `prepare`: the prompts (synthetic sums), a byte-level BPE trained on them, and two random-weight models saved
  once: the dense shape (default Qwen2.5-0.5B) and a mixture-of-experts shape (default Qwen3-30B-A3B's widths, 4
  layers deep: 128 experts of 768, 8 a token), bf16 on a GPU;
- `steadytune`: one `stage: grpo` run with `--set key=value` overrides on the common keys (8 prompts x 8 completions
  of up to 256 tokens, LoRA r 8 on every linear layer and the routed experts, the digit_share reward of
  benchmarks/grpo_vs_trl.py, loss_type dapo, beta 0): seconds per step (from metrics.jsonl, every step logged), peak
  memory, the reward of every step, the path the run took (`rollouts`: synchronous or asynchronous, and why);
- `trl`: TRL's GRPOTrainer on the same model, prompts, reward and keys (its loss_type and importance_sampling_level
  given), generation through transformers' generate (no vLLM), gradient checkpointing on (its default);
- `summary`: the arms' JSON files side by side: steps/s, peak memory, the ratios issue 68 asks for (async / sync,
  each loss against dapo, steadytune / TRL on each shape), and the reward curves of the sync and async arms (the same
  samples: equal rewards after the same number of steps is what "at equal reward" means).

Usage (GPU): bash benchmarks/gpu_rl2.sh (writes $OUT/rl2_*.json, $OUT/rl2_summary.txt, $OUT/rl2.log).
CPU smoke:   W=$(mktemp -d); python benchmarks/grpo_rl2.py prepare --workdir $W --shape tiny --moe-shape moe-tiny &&
             python benchmarks/grpo_rl2.py steadytune --workdir $W --name sync --steps 3 --warmup 1 --prompts 2 \\
                 --generations 4 --completion-length 8 --set async_staleness=0 --output $W/sync.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dpo_vs_trl import peak_gib, reset_memory, train_tokenizer  # noqa: E402
from grpo_vs_trl import digit_share, make_prompts, step_clock  # noqa: E402

MODELS = {"dense": "model_dense", "moe": "model_moe"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("prepare", "steadytune", "trl", "summary"))
    p.add_argument("files", nargs="*", help="summary: the arms' JSON files")
    p.add_argument("--workdir", default=".rl2")
    p.add_argument("--shape", default="qwen2.5-0.5b", help="prepare: the dense shape (steadytune.model.shapes)")
    p.add_argument("--moe-shape", default="qwen3-30b-a3b", help="prepare: the mixture-of-experts shape")
    p.add_argument("--moe-layers", type=int, default=4, help="prepare: the MoE shape's depth (its widths kept)")
    p.add_argument("--model", default="dense", choices=tuple(MODELS))
    p.add_argument("--name", default="arm")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the timing")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion-length", type=int, default=256)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--set", action="append", default=[], help="steadytune: key=value on top of the common keys")
    p.add_argument("--loss", default="dapo", help="trl: loss_type")
    p.add_argument("--level", default="token", help="trl: importance_sampling_level")
    p.add_argument("--output", default="arm.json")
    return p.parse_args(argv)


def device_of() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --- prepare -----------------------------------------------------------------------------------------------------

def prepare(args) -> None:
    from steadytune.model.shapes import shape_config

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = make_prompts(400)
    (work / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
    tokenizer = train_tokenizer([r["prompt"] for r in rows] + [str(i) for i in range(200)], 2048)
    device = device_of()
    for key, shape, layers in (("dense", args.shape, None), ("moe", args.moe_shape, args.moe_layers)):
        from transformers import AutoConfig, AutoModelForCausalLM

        spec = dict(shape_config(shape, layers), vocab_size=len(tokenizer))
        config = AutoConfig.for_model(spec.pop("model_type"), **spec, pad_token_id=tokenizer.pad_token_id,
                                      eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
        torch.manual_seed(0)
        with torch.device(device):   # a GPU draws the random weights of a few billion parameters in seconds
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device.type == "cuda" else
                                                     torch.float32)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        folder = work / MODELS[key]
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        print(f"{key}: {shape}{f' x {layers} layers' if layers else ''}, "
              f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters -> {folder}", flush=True)
        del model
    data = work / "data"
    data.mkdir(exist_ok=True)
    alpaca = [{"instruction": r["prompt"], "input": "", "output": r["solution"], "solution": r["solution"]}
              for r in rows]
    (data / "sums.json").write_text(json.dumps(alpaca), encoding="utf-8")
    (data / "dataset_info.json").write_text(json.dumps({"sums": {"file_name": "sums.json"}}), encoding="utf-8")


# --- arms ---------------------------------------------------------------------------------------------------------

def common(args) -> dict:
    return {"steps": args.steps, "warmup": args.warmup, "prompts": args.prompts, "generations": args.generations,
            "completion_length": args.completion_length, "model": args.model, "name": args.name,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__}


def timed(seconds: list[float], warmup: int) -> dict:
    steady = seconds[warmup:]
    mean = statistics.mean(steady) if steady else float("nan")
    return {"step_seconds": seconds, "seconds_per_step": mean, "steps_per_s": 1.0 / mean if steady else float("nan")}


def run_steadytune(args) -> dict:
    from steadytune.config import load_config
    from steadytune.train import run_training
    from steadytune.training.monitor import read_metrics

    work = Path(args.workdir)
    out = work / f"run_{args.name}"
    keys = {"model_name_or_path": work / MODELS[args.model], "stage": "grpo", "dataset": "sums",
            "dataset_dir": work / "data", "template": "empty", "cutoff_len": 128, "output_dir": out,
            "overwrite_output_dir": True, "per_device_train_batch_size": args.prompts,
            "num_generations": args.generations, "max_completion_length": args.completion_length, "beta": 0.0,
            "loss_type": "dapo", "epsilon": 0.2, "reward_funcs": f"[{ROOT / 'benchmarks' / 'grpo_vs_trl.py'}:digit_share]",
            "lora_rank": 8, "lora_alpha": 16, "lora_target": "all", "learning_rate": args.learning_rate,
            "lr_scheduler_type": "constant", "warmup_steps": 0, "max_grad_norm": 1.0, "max_steps": args.steps,
            "logging_steps": 1, "save_steps": 10**6, "seed": 42}
    overrides = [f"{k}={v}" for k, v in keys.items()] + list(args.set)
    device = device_of()
    reset_memory(device)
    started = time.perf_counter()
    cfg = load_config(None, overrides)
    run_training(cfg, force=True, progress=False)
    wall = time.perf_counter() - started
    records = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r and "target_tokens_per_s" in r]
    seconds, before = [], 0
    for r in records:   # logging every step: the step's completion tokens over their rate
        seconds.append((r["tokens"] - before) / max(r["target_tokens_per_s"], 1e-9))
        before = r["tokens"]
    decided = cfg.decisions.get("rollouts", {})
    return {**common(args), "arm": "steadytune", "set": list(args.set), "wall_seconds": wall,
            "peak_memory_gib": peak_gib(device), **timed(seconds, args.warmup),
            "reward": [r.get("reward") for r in records], "staleness": [r.get("rollouts/staleness") for r in records],
            "completion_length": [r.get("completions/mean_length") for r in records],
            "rollouts": decided.get("value"), "rollouts_why": decided.get("reason")}


def run_trl(args) -> dict:
    from datasets import Dataset
    from datasets.table import InMemoryTable
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import trl
    from steadytune.model.lora import resolve_lora_targets
    from steadytune.model.moe.anatomy import expert_sites

    device = device_of()

    work = Path(args.workdir)
    rows = json.loads((work / "rows.json").read_text(encoding="utf-8"))[:args.steps * args.prompts]
    reset_memory(device)
    bf16 = device.type == "cuda"
    folder = work / MODELS[args.model]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16 if bf16 else torch.float32,
                                                 attn_implementation="sdpa").to(device)
    # The same adapter as steadytune's lora_target: all: every linear layer but the head and the routers, and the
    # routed experts' fused weights through peft's target_parameters.
    experts = sorted({f"mlp.experts.{name}" for site in expert_sites(model)
                      for name, _ in site.experts.named_parameters(recurse=False)})
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=resolve_lora_targets(model, "all"),
                      target_parameters=experts or None, task_type="CAUSAL_LM")
    config = GRPOConfig(output_dir=str(work / f"trl_{args.name}"), max_steps=args.steps,
                        per_device_train_batch_size=args.prompts * args.generations,
                        num_generations=args.generations, max_completion_length=args.completion_length,
                        temperature=1.0, beta=0.0, loss_type=args.loss, importance_sampling_level=args.level,
                        epsilon=0.2, learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
                        max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to="none", bf16=bf16,
                        fp16=False, use_cpu=device.type != "cuda", gradient_checkpointing=True, disable_dropout=True,
                        dataloader_num_workers=0, seed=42, shuffle_dataset=False)
    clock = step_clock(device)
    prompts = Dataset(InMemoryTable.from_pylist(rows), fingerprint=f"grpo-rl2-{args.name}")
    trainer = GRPOTrainer(model=model, reward_funcs=[digit_share], args=config, train_dataset=prompts,
                          processing_class=tokenizer, peft_config=lora, callbacks=[clock])
    clock.times.append(time.perf_counter())
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    seconds = [b - a for a, b in zip(clock.times[:-1], clock.times[1:])]
    return {**common(args), "arm": "trl", "trl": trl.__version__, "loss_type": args.loss, "level": args.level,
            "wall_seconds": wall, "peak_memory_gib": peak_gib(device), **timed(seconds, args.warmup),
            "reward": [r.get("reward") for r in clock.logs],
            "completion_length": [r.get("completions/mean_length") for r in clock.logs]}


# --- summary ------------------------------------------------------------------------------------------------------

def summary(files: list[str]) -> str:
    arms = {}
    for name in files:
        try:
            arm = json.loads(Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            print(f"{name}: unreadable ({e})", file=sys.stderr)
            continue
        if isinstance(arm, dict) and "name" in arm:
            arms[arm["name"]] = arm
    lines = [f"{'arm':<14} {'model':<6} {'s/step':>8} {'steps/s':>8} {'peak GiB':>9}  rollouts / loss", "-" * 72]
    for name, a in arms.items():
        peak = f"{a['peak_memory_gib']:.2f}" if a.get("peak_memory_gib") is not None else "-"
        what = a.get("rollouts") or f"trl {a.get('loss_type')} {a.get('level')}"
        lines.append(f"{name:<14} {a['model']:<6} {a['seconds_per_step']:>8.3f} {a['steps_per_s']:>8.3f} {peak:>9}  "
                     f"{what} {' '.join(a.get('set', []))}")
    lines.append("")

    def ratio(mine: str, theirs: str, what: str) -> None:
        if mine in arms and theirs in arms:
            a, b = arms[mine], arms[theirs]
            memory = (f", peak memory {a['peak_memory_gib'] / b['peak_memory_gib']:.2f}x"
                      if a.get("peak_memory_gib") and b.get("peak_memory_gib") else "")
            lines.append(f"{what}: {a['steps_per_s'] / b['steps_per_s']:.2f}x steps/s{memory}  ({mine} / {theirs})")

    ratio("async", "sync", "async / sync (issue 68 asks >= 1.3x)")
    for name in arms:
        if name.startswith("loss_"):
            ratio(name, "async", f"{name[5:]} / dapo")
    ratio("async", "trl_dense", "steadytune / TRL, dense shape")
    ratio("moe", "trl_moe", "steadytune / TRL, MoE shape (issue 68 asks >= 5x at <= its memory)")
    for name in ("sync", "async"):
        if name in arms:
            rewards = [round(r, 4) if r is not None else None for r in arms[name]["reward"]]
            lines.append(f"reward by step, {name}: {rewards}  (staleness {arms[name].get('staleness')})")
            lines.append(f"  why {name}: {arms[name].get('rollouts_why')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command == "prepare":
        prepare(args)
        return
    if args.command == "summary":
        print(summary(args.files))
        return
    result = run_steadytune(args) if args.command == "steadytune" else run_trl(args)
    Path(args.output).write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"{args.name}: {result['seconds_per_step']:.3f} s/step, {result['steps_per_s']:.3f} steps/s, peak "
          f"{result['peak_memory_gib']} GiB", flush=True)


if __name__ == "__main__":
    main()
