"""`steadytune train` on a mixture of experts on a GPU, end to end, as a user runs it: a Qwen3-MoE of the given widths
(random weights, the word tokenizer of bench), synthetic alpaca rows whose lengths follow LLaMA-Factory's demo sets,
trained with train's defaults (compiled layers, CUDA graphs, static shapes, fp8 for the attention's linears, ...) and
again eagerly (no compile, no graphs), on the same rows. Prints the decisions about the experts, tokens/s of both, and
the largest relative difference of their step losses (the same training, two execution paths).

    python benchmarks/moe_train_check.py --out /tmp/moe_check [--layers 8 --experts 64 --top-k 8 --steps 60]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

from steadytune.bench.workload import EOS_ID, PAD_ID, dataset_lengths, synthetic_examples, word_tokenizer, words_of
from steadytune.config import load_config
from steadytune.train import run_training
from steadytune.training.monitor import read_metrics


def model_folder(folder: Path, args) -> Path:
    config = AutoConfig.for_model("qwen3_moe", hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                                  moe_intermediate_size=args.moe_intermediate, num_experts=args.experts,
                                  num_experts_per_tok=args.top_k, num_hidden_layers=args.layers, num_attention_heads=16,
                                  num_key_value_heads=4, head_dim=128, vocab_size=args.vocab, norm_topk_prob=True,
                                  tie_word_embeddings=False, pad_token_id=PAD_ID, eos_token_id=EOS_ID)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    word_tokenizer(args.vocab).save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return folder


def data_file(path: Path, args) -> Path:
    rows = []
    for example in synthetic_examples(dataset_lengths(None), args.examples, args.vocab, 1024):
        prompt_len = sum(1 for label in example["labels"] if label == -100)
        ids = example["input_ids"]
        rows.append({"instruction": words_of(ids[:prompt_len]), "input": "", "output": words_of(ids[prompt_len:])})
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def train(out: Path, model: Path, data: Path, args, **keys) -> dict:
    overrides = {"model_name_or_path": model, "dataset": data, "template": "empty", "cutoff_len": 1024,
                 "output_dir": out, "per_device_train_batch_size": 8, "max_steps": args.steps, "logging_steps": 10,
                 "save_steps": 10_000, "learning_rate": 1e-4, "lora_rank": 16, "overwrite_output_dir": True,
                 "moe_aux_loss_coef": 0.001, **keys}
    started = time.perf_counter()
    result = run_training(load_config(None, [f"{k}={v}" for k, v in overrides.items()]), progress=False)
    seconds = time.perf_counter() - started
    steps = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    decisions = yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))["decisions"]
    shown = {k: decisions[k] for k in ("trainable_by_kind", "moe_grouped_mm", "torch_compile", "cuda_graphs",
                                      "static_shapes", "fp8_base", "gradient_checkpointing") if k in decisions}
    for key, decision in shown.items():
        print(f"  {key}: {decision['value']} ({decision['reason'][:200]})", flush=True)
    return {"losses": result.losses, "seconds": seconds, "train_seconds": result.train_seconds,
            "input_tokens_per_s": result.input_tokens_per_s, "last": steps[-1] if steps else None,
            "decisions": shown, "peak_gib": torch.cuda.max_memory_allocated() / 2**30
            if torch.cuda.is_available() else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--moe-intermediate", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--keys", nargs="*", default=[], metavar="KEY=VALUE",
                        help="train keys for both runs (e.g. torch_compile=true max_tokens_per_batch=8192)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = model_folder(args.out / "model", args)
    data = data_file(args.out / "data.json", args)
    report = {}
    common = dict(item.split("=", 1) for item in args.keys)
    eager = {"torch_compile": False, "cuda_graphs": False, "fp8_base": False}
    for name, keys in (("default", common), ("eager", {**common, **eager})):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        report[name] = train(args.out / name, model, data, args, **keys)
        last = report[name]["last"] or {}
        print(f"{name}: {report[name]['input_tokens_per_s']:,.0f} input tokens/s, peak "
              f"{report[name]['peak_gib'] or 0:.1f} GiB, loss {last.get('loss')}, moe_aux_loss {last.get('moe_aux_loss')}, "
              f"moe_load_max {last.get('moe_load_max')}", flush=True)
    a, b = report["default"]["losses"], report["eager"]["losses"]
    report["largest_relative_loss_difference"] = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    print(f"default vs eager step losses: largest relative difference {report['largest_relative_loss_difference']:.2e}"
          f" over {len(a)} steps; speed {report['default']['input_tokens_per_s'] / report['eager']['input_tokens_per_s']:.2f}x")
    (args.out / "moe_train_check.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
