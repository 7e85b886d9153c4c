"""steadytune's `stage: grpo` against TRL's GRPOTrainer, side by side in one process: seconds per optimizer step
(generation included) and peak GPU memory, on the same model, prompts, group size, lengths and steps.

What is held equal:
- the model: a named shape (steadytune.model.shapes, default Qwen2.5-0.5B) with random weights and the vocabulary of
  a byte-level BPE trained here on the prompts (no hub), saved once and loaded by both; random weights rarely sample
  the stop token, so nearly every completion runs to max_completion_length in both arms (the work per step is the
  same; the completions' mean length is printed for both);
- the prompts: synthetic sums ("What is 37 plus 5?"), as raw text (no chat template: TRL's plain-prompt path and
  steadytune's `empty` template give the same prompt tokens), in the same order;
- the method: LoRA r 8 / alpha 16 on every linear layer, num_generations completions per prompt, per step
  --prompts prompts (TRL counts completions: its per_device_train_batch_size is prompts x num_generations),
  sampling at temperature 1 with no top-p / top-k (TRL's defaults), beta 0, loss_type dapo, epsilon 0.2, one
  optimizer step per generation, AdamW at a constant learning rate, clipping at 1.0, bf16, dropout off;
- the reward: one function, `digit_share` below (the share of a completion's characters that are digits), given to
  both (steadytune names it as path/file.py:function), so the advantages are not all zero.
What differs is each tool's machinery. TRL (1.16, no vLLM) generates with transformers' `generate` on the unwrapped
model, then scores the padded batch; its defaults turn gradient checkpointing on (the `trl` arm), and the
`trl_no_gc` arm turns it off (faster, more memory). steadytune generates with its batched decoder (slot KV cache,
LoRA applied unmerged, CUDA graphs per shape bucket) and trains on the packed prompt + completion rows.

Seconds per step: TRL's from a callback at each step's end after a device synchronisation; steadytune's from
metrics.jsonl (logging every step: the step's target tokens over its target tokens/s, each report synchronised).
The first --warmup steps are left out (allocation, graph capture, autotuning).

Usage (GPU): python benchmarks/grpo_vs_trl.py --steps 20 --output $OUT/grpo_vs_trl.json
CPU smoke:   python benchmarks/grpo_vs_trl.py --shape tiny --steps 3 --warmup 1 --prompts 2 --generations 4 \\
                 --completion-length 8 --arms steadytune,trl
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# The DPO comparison's pieces: a byte-level BPE trained on the data (no hub), and the memory counters between arms.
from dpo_vs_trl import peak_gib, reset_memory, train_tokenizer  # noqa: E402
QUESTIONS = ("What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}, and give the number.",
             "A shop sold {a} apples in the morning and {b} in the afternoon. How many apples did it sell?")


def digit_share(completions, **_columns) -> list[float]:
    """The reward both arms use: the share of the completion's characters that are digits."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="qwen2.5-0.5b", help="model shape (steadytune.model.shapes), random weights")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per arm")
    p.add_argument("--warmup", type=int, default=4, help="first steps left out of the timing")
    p.add_argument("--prompts", type=int, default=8, help="prompts per optimizer step")
    p.add_argument("--generations", type=int, default=8, help="num_generations (completions per prompt)")
    p.add_argument("--completion-length", type=int, default=256, help="max_completion_length")
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--arms", default="trl,trl_no_gc,steadytune,steadytune_gc",
                   help="comma list of trl (its defaults: gradient checkpointing on), trl_no_gc, steadytune (its "
                        "defaults: checkpointing only where memory needs it), steadytune_gc (checkpointing on); TRL "
                        "first, so what it leaves allocated counts against steadytune, not the other way round")
    p.add_argument("--workdir", default=None, help="where the model and runs go (default: a temporary folder)")
    p.add_argument("--output", default="grpo_vs_trl.json")
    return p.parse_args(argv)


# --- shared inputs -----------------------------------------------------------------------------------------

def make_prompts(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        rows.append({"prompt": QUESTIONS[i % len(QUESTIONS)].format(a=a, b=b), "solution": str(a + b)})
    return rows


def make_model_folder(shape: str, tokenizer, folder: Path, device: torch.device) -> Path:
    """The shape with the tokenizer's vocabulary (every sampled id decodes to text), bf16 on a GPU."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from steadytune.model.shapes import SHAPES

    spec = dict(SHAPES[shape], vocab_size=len(tokenizer))
    config = AutoConfig.for_model(spec.pop("model_type"), **spec, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


def step_clock(device: torch.device):
    """A TrainerCallback that notes the time at each step's end (after a device synchronisation) and the logs that
    carry a reward: TRL's seconds per step, as steadytune's come from metrics.jsonl (grpo_rl2.py times TRL the same)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.times, self.logs = [], []

        def on_step_end(self, *_, **__):
            if device.type == "cuda":
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "reward" in logs:
                self.logs.append(logs)

    return StepClock()


# --- the arms ------------------------------------------------------------------------------------------------

def run_steadytune(args, model_dir: Path, rows: list[dict], work: Path, device: torch.device,
                   checkpointing: bool = False) -> dict:
    from steadytune.config import load_config
    from steadytune.train import run_training
    from steadytune.training.monitor import read_metrics

    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    alpaca = [{"instruction": r["prompt"], "input": "", "output": r["solution"], "solution": r["solution"]}
              for r in rows]
    (data / "sums.json").write_text(json.dumps(alpaca), encoding="utf-8")
    (data / "dataset_info.json").write_text(json.dumps({"sums": {"file_name": "sums.json"}}), encoding="utf-8")
    out = work / ("steadytune_gc" if checkpointing else "steadytune")
    keys = {"model_name_or_path": model_dir, "stage": "grpo", "dataset": "sums", "dataset_dir": data,
            "template": "empty", "cutoff_len": 128, "output_dir": out, "overwrite_output_dir": True,
            "per_device_train_batch_size": args.prompts, "num_generations": args.generations,
            "max_completion_length": args.completion_length, "beta": 0.0, "loss_type": "dapo", "epsilon": 0.2,
            "reward_funcs": f"[{Path(__file__).resolve()}:digit_share]", "lora_rank": args.lora_rank,
            "lora_alpha": 2 * args.lora_rank, "lora_target": "all", "learning_rate": args.learning_rate,
            "lr_scheduler_type": "constant", "warmup_steps": 0, "max_grad_norm": 1.0, "max_steps": args.steps,
            "logging_steps": 1, "save_steps": 10**6, "seed": 42}
    if checkpointing:   # TRL's default; steadytune's own default turns it on only when memory needs it
        keys["gradient_checkpointing"] = True
    reset_memory(device)
    started = time.perf_counter()
    run_training(load_config(None, [f"{k}={v}" for k, v in keys.items()]), force=True, progress=False)
    wall = time.perf_counter() - started
    records = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r and "target_tokens_per_s" in r]
    seconds, before = [], 0
    for r in records:   # logging every step: the step's completion tokens over their rate
        seconds.append((r["tokens"] - before) / max(r["target_tokens_per_s"], 1e-9))
        before = r["tokens"]
    return {"step_seconds": seconds, "wall_seconds": wall, "peak_memory_gib": peak_gib(device),
            "reward": [r.get("reward") for r in records],
            "completion_length": [r.get("completions/mean_length") for r in records]}


def run_trl(args, model_dir: Path, rows: list[dict], work: Path, device: torch.device, checkpointing: bool) -> dict:
    from datasets import Dataset
    from datasets.table import InMemoryTable
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from steadytune.model.lora import resolve_lora_targets

    reset_memory(device)
    bf16 = device.type == "cuda"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if bf16 else torch.float32,
                                                 attn_implementation="sdpa").to(device)
    lora = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0,
                      target_modules=resolve_lora_targets(model, "all"), task_type="CAUSAL_LM")
    config = GRPOConfig(output_dir=str(work / ("trl" if checkpointing else "trl_no_gc")), max_steps=args.steps,
                        per_device_train_batch_size=args.prompts * args.generations,
                        num_generations=args.generations, max_completion_length=args.completion_length,
                        temperature=1.0, beta=0.0, loss_type="dapo", epsilon=0.2, learning_rate=args.learning_rate,
                        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, logging_steps=1,
                        save_strategy="no", report_to="none", bf16=bf16, fp16=False, use_cpu=device.type != "cuda",
                        gradient_checkpointing=checkpointing, disable_dropout=True, dataloader_num_workers=0,
                        seed=42, shuffle_dataset=False)
    clock = step_clock(device)
    # A fixed fingerprint: datasets would otherwise hash the table with dill (which failed on the GPU machine's
    # Python 3.12 + pyarrow for the DPO comparison); nothing here is cached by fingerprint.
    prompts = Dataset(InMemoryTable.from_pylist(rows), fingerprint="grpo-vs-trl-prompts")
    trainer = GRPOTrainer(model=model, reward_funcs=[digit_share], args=config, train_dataset=prompts,
                          processing_class=tokenizer, peft_config=lora, callbacks=[clock])
    clock.times.append(time.perf_counter())
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    seconds = [b - a for a, b in zip(clock.times[:-1], clock.times[1:])]
    peak = peak_gib(device)
    result = {"step_seconds": seconds, "wall_seconds": wall, "peak_memory_gib": peak,
              "reward": [r.get("reward") for r in clock.logs],
              "completion_length": [r.get("completions/mean_length") for r in clock.logs]}
    del trainer, model
    return result


# --- report ------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(arms) - {"trl", "trl_no_gc", "steadytune", "steadytune_gc"}
    if unknown:
        raise SystemExit(f"unknown arm(s) {', '.join(sorted(unknown))} (trl, trl_no_gc, steadytune, steadytune_gc)")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="grpo_vs_trl-"))
    rows = make_prompts(args.steps * args.prompts)
    tokenizer = train_tokenizer([r["prompt"] for r in rows] + [str(i) for i in range(200)], 2048)
    model_dir = make_model_folder(args.shape, tokenizer, work / "model", device)
    report: dict = {"shape": args.shape, "steps": args.steps, "warmup": args.warmup, "prompts_per_step": args.prompts,
                    "num_generations": args.generations, "max_completion_length": args.completion_length,
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "torch": torch.__version__}
    failed = {}
    for arm in arms:
        print(f"--- {arm}", flush=True)
        try:
            if arm.startswith("steadytune"):
                report[arm] = run_steadytune(args, model_dir, rows, work, device,
                                             checkpointing=arm == "steadytune_gc")
            else:
                import trl
                report[arm] = run_trl(args, model_dir, rows, work, device, checkpointing=arm == "trl")
                report["trl_version"] = trl.__version__
        except Exception as e:  # noqa: BLE001 - one arm's failure is reported; the other arms still count
            import traceback
            traceback.print_exc()
            failed[arm] = f"{type(e).__name__}: {e}"
            print(f"--- {arm} FAILED: {failed[arm]}", flush=True)
            continue
        r = report[arm]
        steady = r["step_seconds"][args.warmup:]
        r["seconds_per_step"] = statistics.mean(steady) if steady else float("nan")
        r["steps_per_s"] = 1.0 / r["seconds_per_step"]
    report["failed"] = failed
    arms = [a for a in arms if a not in failed]

    lengths = {arm: statistics.mean([x for x in report[arm]["completion_length"] if x is not None] or [float("nan")])
               for arm in arms}
    lines = [f"{'arm':<13} {'s/step':>8} {'steps/s':>8} {'peak GiB':>9} {'mean completion':>16}  (steps "
             f"{args.warmup + 1}-{args.steps}; {args.prompts} prompts x {args.generations}, up to "
             f"{args.completion_length} tokens)"]
    for arm in arms:
        r = report[arm]
        peak = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "-"
        lines.append(f"{arm:<13} {r['seconds_per_step']:>8.3f} {r['steps_per_s']:>8.3f} {peak:>9} "
                     f"{lengths[arm]:>16.1f}")
    for mine in ("steadytune", "steadytune_gc"):
        if mine not in report:
            continue
        ours = report[mine]
        for arm in ("trl", "trl_no_gc"):
            if arm in report:
                theirs = report[arm]
                speed = ours["steps_per_s"] / theirs["steps_per_s"]
                memory = (ours["peak_memory_gib"] / theirs["peak_memory_gib"]
                          if ours["peak_memory_gib"] and theirs["peak_memory_gib"] else None)
                suffix = "" if mine == "steadytune" else "_gc"   # the first arm's keys as before
                report[f"speedup{suffix}_vs_{arm}"], report[f"memory_ratio{suffix}_vs_{arm}"] = speed, memory
                lines.append(f"{mine} / {arm}: {speed:.2f}x steps/s"
                             + (f", {memory:.2f}x peak memory" if memory is not None else ""))
    lines += [f"{arm}: FAILED ({why})" for arm, why in failed.items()]
    print("\n".join(lines), flush=True)
    Path(args.output).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
