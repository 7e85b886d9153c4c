"""steadytune DPO against TRL's DPOTrainer, side by side in one process, on the same pairs, the same model shape
and the same LoRA adapter: real tokens/s, peak GPU memory and the loss of every step.

What is held equal:
- the model: a named shape (steadytune.model.shapes, default Qwen2.5-0.5B) with random weights, saved once, loaded by both;
- the tokens: LLaMA-Factory's DPO demo pairs (dpo_en_demo.json, sharegpt), rendered with the qwen template and
  tokenised once by steadytune; TRL is handed those very token ids (prompt_ids / chosen_ids / rejected_ids);
  the tokenizer is a byte-level BPE trained here on the pairs' own text (no hub), so lengths are those of a real
  BPE (~4 characters per token);
- the batches: steadytune's micro-batches (a token budget of real tokens per step, order seeded), and TRL iterates
  exactly those groups of pairs, step for step;
- the start: one LoRA adapter (r 8, alpha 16, every linear layer, seeded) saved first; both train from it, so
  both start at loss ln 2 and see the same gradients up to arithmetic;
- the update: AdamW, constant learning rate, no warm-up, clipping at 1.0, beta 0.1, sigmoid loss, bf16 autocast
  on a GPU, dropout off, gradient checkpointing the same in both (off unless --gradient-checkpointing on).
What differs is each tool's own machinery: TRL pads every step's 2 x pairs sequences to the longest; steadytune
packs them into one varlen row (no padding), runs the reference as the adapter-disabled model on the same packed
row, and scores answer tokens only with its chunked head. (TRL 1.x also computes log-probs with a fused head.)

Tokens/s = real (non-pad) tokens of the step's pairs / step time, summed over the steps after --warmup; step times
come from steadytune's metrics.jsonl (tokens_per_s of each logged step) and from a TRL callback, both taken after a
device synchronisation at the step's end.

Usage (GPU): python benchmarks/dpo_vs_trl.py --dataset PATH/dpo_en_demo.json --steps 50 --output $OUT/dpo_vs_trl.json
CPU smoke:   python benchmarks/dpo_vs_trl.py --shape tiny --steps 3 --warmup 1 --max-tokens 1024 --cutoff-len 128
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DATA = ROOT.parent / "shared" / "fixtures" / "llamafactory" / "data" / "dpo_en_demo.json"
SPECIALS = ["<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="qwen2.5-0.5b", help="model shape (steadytune.model.shapes), random weights")
    p.add_argument("--dataset", default=str(DEFAULT_DATA), help="LLaMA-Factory sharegpt ranking file (dpo_en_demo.json)")
    p.add_argument("--steps", type=int, default=50, help="optimizer steps per arm")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of tokens/s (allocation, autotuning)")
    p.add_argument("--max-tokens", type=int, default=8192, help="real tokens per step (steadytune's token budget)")
    p.add_argument("--cutoff-len", type=int, default=1024, help="cutoff_len of each sequence (prompt + answer)")
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000, help="size of the BPE trained on the pairs")
    p.add_argument("--gradient-checkpointing", choices=("on", "off"), default="off")
    p.add_argument("--torch-compile", choices=("auto", "on", "off"), default="auto",
                   help="steadytune's torch_compile (auto: its default, off below 400 micro-batches; on: compiled "
                        "layers over one static shape of packed pairs, the compile time falling in the --warmup steps)")
    p.add_argument("--arms", default="trl,steadytune",
                   help="comma list of: trl, steadytune, run in this order (TRL first: anything it leaves allocated "
                        "counts against steadytune's peak, not the other way round)")
    p.add_argument("--workdir", default=None, help="where the model, adapter and runs go (default: a temp folder)")
    p.add_argument("--output", default="dpo_vs_trl.json")
    return p.parse_args(argv)


# --- shared inputs -----------------------------------------------------------------------------------------

def pair_texts(path: Path) -> list[str]:
    rows = json.loads(path.read_text(encoding="utf-8"))
    texts = []
    for r in rows:
        texts += [t["value"] for t in r["conversations"]] + [r["chosen"]["value"], r["rejected"]["value"]]
    return texts


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE trained on the data itself: realistic token counts without a model hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>",
                                   bos_token=None, unk_token=None)


def make_model_folder(shape: str, tokenizer, folder: Path, device: torch.device) -> Path:
    from steadytune.model.shapes import build_shape

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_shape(shape, dtype=dtype, device=device)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


def make_initial_adapter(model_dir: Path, folder: Path, rank: int, seed: int = 0) -> Path:
    """One LoRA adapter both arms start from (A seeded random, B zero: the policy starts equal to the reference)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from steadytune.model.lora import resolve_lora_targets

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    peft_model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                 target_modules=resolve_lora_targets(base, "all"),
                                                 task_type="CAUSAL_LM"))
    peft_model.save_pretrained(folder)
    return folder


def steadytune_overrides(args, model_dir: Path, adapter: Path, data: Path, out: Path) -> list[str]:
    values = {"model_name_or_path": model_dir, "adapter_name_or_path": adapter, "stage": "dpo", "pref_loss": "sigmoid",
              "pref_beta": 0.1, "dataset": data.name, "dataset_dir": data.parent, "template": "qwen",
              "cutoff_len": args.cutoff_len, "max_tokens_per_batch": args.max_tokens, "max_steps": args.steps,
              "learning_rate": args.learning_rate, "lr_scheduler_type": "constant", "warmup_steps": 0,
              "max_grad_norm": 1.0, "logging_steps": 1, "save_steps": 10**6, "output_dir": out,
              "overwrite_output_dir": True, "gradient_checkpointing": args.gradient_checkpointing == "on",
              "seed": 42}  # everything else as a user gets it (packing, guard, fused AdamW, ...)
    if args.torch_compile != "auto":
        values["torch_compile"] = args.torch_compile == "on"
    return [f"{k}={v}" for k, v in values.items()]


def step_groups(cfg, n_steps: int):
    """steadytune's micro-batches (lists of pair indices) for the first n_steps, and the prepared pairs."""
    from steadytune.training.batches import TrainBatches
    from steadytune.stages.table import STAGES
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model.model_name_or_path)
    data = STAGES["dpo"].prepare_data(cfg, tokenizer)
    batches = TrainBatches(cfg, data, tokenizer)
    groups, epoch = [], 0
    while len(groups) < n_steps:
        groups += batches.micro_batches(epoch)
        epoch += 1
    return groups[:n_steps], data.train


def trl_rows(pairs: list[dict]) -> list[dict]:
    """Our pairs as TRL's tokenised preference rows: the prompt is the unlabelled head of each sequence."""
    rows = []
    for e in pairs:
        n = e["lengths"][0]
        chosen_ids, chosen_labels = e["input_ids"][:n], e["labels"][:n]
        rejected_ids = e["input_ids"][n:]
        prompt_len = next(i for i, x in enumerate(chosen_labels) if x != -100)
        rows.append({"prompt_ids": chosen_ids[:prompt_len], "chosen_ids": chosen_ids[prompt_len:],
                     "rejected_ids": rejected_ids[prompt_len:]})
    return rows


# --- the two arms ------------------------------------------------------------------------------------------

def reset_memory(device: torch.device) -> float | None:
    """Free what the previous arm left and restart the peak counter; -> GiB still allocated (should be ~0)."""
    gc.collect()
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated() / 2**30


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None


def run_steadytune(args, overrides: list[str], out: Path, device: torch.device) -> dict:
    from steadytune.config import load_config
    from steadytune.training.monitor import read_metrics
    from steadytune.train import run_training

    allocated_before = reset_memory(device)
    result = run_training(load_config(None, overrides), force=True, progress=False)
    steps = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r and "tokens_per_s" in r]  # not the guard's event rows
    return {"losses": result.losses, "tokens_per_s_by_step": [r["tokens_per_s"] for r in steps],
            "peak_memory_gib": peak_gib(device), "allocated_before_gib": allocated_before}


def run_trl(args, model_dir: Path, adapter: Path, rows: list[dict], groups: list[list[int]], out: Path,
            device: torch.device) -> dict:
    from datasets import Dataset
    from datasets.table import InMemoryTable
    from peft import PeftModel
    from torch.utils.data import DataLoader
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    class SameGroups(DPOTrainer):
        """TRL's trainer, fed our token ids and our step groups (everything else is TRL's own)."""

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset  # already tokenised: prompt_ids / chosen_ids / rejected_ids

        def get_train_dataloader(self):
            loader = DataLoader(self.train_dataset, batch_sampler=groups, collate_fn=self.data_collator)
            return self.accelerator.prepare(loader)

    class StepClock(TrainerCallback):
        def __init__(self):
            self.times, self.losses = [], []

        def on_step_end(self, *_, **__):
            if device.type == "cuda":
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    allocated_before = reset_memory(device)
    bf16 = device.type == "cuda"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if bf16 else torch.float32,
                                                attn_implementation="sdpa").to(device)
    model = PeftModel.from_pretrained(base, adapter, is_trainable=True)
    config = DPOConfig(output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=1,
                       learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
                       max_grad_norm=1.0, beta=0.1, loss_type=["sigmoid"], logging_steps=1, save_strategy="no",
                       report_to="none", bf16=bf16, fp16=False, use_cpu=device.type != "cuda",
                       gradient_checkpointing=args.gradient_checkpointing == "on", max_length=None,
                       dataloader_num_workers=0, seed=42, disable_dropout=True, remove_unused_columns=False)
    clock = StepClock()
    # A fixed fingerprint: datasets would otherwise hash the whole table with dill, which fails on the GPU machine's
    # Python 3.12 + pyarrow 26 ("Can't pickle <class 'MonthDayNano'>"); nothing here is cached by fingerprint.
    pairs = Dataset(InMemoryTable.from_pylist(rows), fingerprint="dpo-vs-trl-pairs")
    trainer = SameGroups(model=model, args=config, train_dataset=pairs, processing_class=tokenizer,
                         callbacks=[clock])
    clock.times.append(time.perf_counter())  # the first step's clock starts when training does
    trainer.train()
    step_times = [b - a for a, b in zip(clock.times[:-1], clock.times[1:])]
    peak = peak_gib(device)
    del trainer, model, base
    return {"losses": clock.losses, "step_seconds": step_times, "peak_memory_gib": peak,
            "allocated_before_gib": allocated_before}


# --- report ------------------------------------------------------------------------------------------------

def steady_rate(tokens: list[int], seconds: list[float], warmup: int) -> float:
    return sum(tokens[warmup:]) / max(sum(seconds[warmup:]), 1e-9)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from steadytune.config import load_config

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="dpo_vs_trl-"))
    data = Path(args.dataset)
    if not data.is_file():
        raise SystemExit(f"dataset file not found: {data} (pass --dataset PATH/dpo_en_demo.json)")

    t0 = time.perf_counter()
    from steadytune.model.shapes import SHAPES
    tokenizer = train_tokenizer(pair_texts(data), min(args.vocab, SHAPES[args.shape]["vocab_size"]))
    model_dir = make_model_folder(args.shape, tokenizer, work / "model", device)
    adapter = make_initial_adapter(model_dir, work / "init_adapter", args.lora_rank)
    overrides = steadytune_overrides(args, model_dir, adapter, data, work / "steadytune")
    groups, pairs = step_groups(load_config(None, overrides), args.steps)
    tokens = [sum(len(pairs[i]["input_ids"]) for i in g) for g in groups]
    print(f"set-up {time.perf_counter() - t0:.1f} s: shape {args.shape}, {len(pairs)} pairs, {args.steps} steps of "
          f"{sum(len(g) for g in groups) / len(groups):.1f} pairs / {sum(tokens) / len(tokens):.0f} real tokens on "
          f"average, device {device}", flush=True)

    report: dict = {"shape": args.shape, "steps": args.steps, "warmup": args.warmup, "device": str(device),
                    "max_tokens": args.max_tokens, "cutoff_len": args.cutoff_len, "pairs_per_step": [len(g) for g in groups],
                    "real_tokens_per_step": tokens, "gradient_checkpointing": args.gradient_checkpointing}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    for arm in arms:
        if arm == "steadytune":
            ours = run_steadytune(args, overrides, work / "steadytune", device)
            seconds = [n / max(r, 1e-9) for n, r in zip(tokens, ours["tokens_per_s_by_step"])]
            ours["tokens_per_s"] = steady_rate(tokens, seconds, args.warmup)
            report["steadytune"] = ours
        elif arm == "trl":
            import trl
            theirs = run_trl(args, model_dir, adapter, trl_rows(pairs), groups, work / "trl", device)
            theirs["tokens_per_s"] = steady_rate(tokens, theirs["step_seconds"], args.warmup)
            theirs["trl_version"] = trl.__version__
            report["trl"] = theirs
        else:
            raise SystemExit(f"unknown arm {arm!r} (trl, steadytune)")

    lines = [f"{'arm':<11} {'tokens/s':>10} {'peak GiB':>9}  loss step 1 -> {args.steps}"]
    for arm in [a for a in ("steadytune", "trl") if a in report]:
        r = report[arm]
        peak = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "-"
        lines.append(f"{arm:<11} {r['tokens_per_s']:>10.0f} {peak:>9}  {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
    if "steadytune" in report and "trl" in report:
        a, b = report["steadytune"], report["trl"]
        diffs = [abs(x - y) for x, y in zip(a["losses"], b["losses"])]
        report["speedup"] = a["tokens_per_s"] / b["tokens_per_s"]
        if a["peak_memory_gib"] and b["peak_memory_gib"]:
            report["memory_ratio"] = a["peak_memory_gib"] / b["peak_memory_gib"]
        report["loss_abs_diff"] = {"max": max(diffs), "mean": sum(diffs) / len(diffs)}
        # Noise scale: how much the loss moves from one step to the next within one arm.
        moves = [abs(x - y) for x, y in zip(b["losses"][1:], b["losses"][:-1])]
        report["loss_step_to_step_change_trl"] = sum(moves) / max(len(moves), 1)
        lines.append(f"steadytune / trl: {report['speedup']:.2f}x tokens/s"
                     + (f", {report['memory_ratio']:.2f}x peak memory" if "memory_ratio" in report else "")
                     + f"; |loss difference| mean {report['loss_abs_diff']['mean']:.4f}, max "
                     f"{report['loss_abs_diff']['max']:.4f} (TRL's own step-to-step change: "
                     f"{report['loss_step_to_step_change_trl']:.4f})")
        lines.append("step  steadytune  trl")
        lines += [f"{i + 1:>4}  {x:.5f}    {y:.5f}" for i, (x, y) in enumerate(zip(a["losses"], b["losses"]))]
    print("\n".join(lines), flush=True)
    Path(args.output).write_text(json.dumps(report, indent=1), encoding="utf-8")
    if not all(math.isfinite(x) for arm in ("steadytune", "trl") if arm in report for x in report[arm]["losses"]):
        raise SystemExit("a loss was not finite")
    return report


if __name__ == "__main__":
    main()
