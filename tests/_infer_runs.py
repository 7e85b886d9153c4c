"""Run folders for the inference tests, built in seconds: a tiny model, an adapter made by steadytune's own
`attach_adapter` (with random, non-zero LoRA B so a merge has something to fold in, or trained a few dozen steps
on a trivial task), the tokenizer, run_config.yaml and the card, exactly as `steadytune train` leaves them."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch

from steadytune.config import load_config, save_resolved_config
from steadytune.infer.card import write_run_card
from steadytune.model.load import load_model_and_tokenizer
from steadytune.model.lora import attach_adapter
from steadytune.training.run_folder import LOCK

LABELS = ["消极", "积极"]
NEG = ["太差了", "很失望", "再也不买了", "包装破损", "讨厌"]
POS = ["很好", "质量不错", "非常满意", "物流很快", "喜欢"]
PROMPT = "评论：{text}情感："
TEXTS = ["The quick brown fox", "这个商品很好", "What is the capital of France?", "Give three tips.",
         "太差了，等了一个小时没人理", "Hello! How can I assist you today?", "书的内容很精彩", "包装破损，很失望",
         "user assistant system", "0123456789", "好评 差评 推荐", "The capital of France is Paris.",
         "Eat a balanced diet", "物流很快，非常满意", "Review: this product is great.", "判断下面这段话的情绪类别",
         "喜欢 讨厌", "exercise", "( ) [ ] { }", "再也不买了"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def classification_data(root: Path) -> tuple[Path, Path]:
    rows = [{"text": t, "label": LABELS[0]} for t in NEG] + [{"text": t, "label": LABELS[1]} for t in POS]
    return write_jsonl(root / "train.jsonl", rows * 2), write_jsonl(root / "test.jsonl", rows)


def classification_keys(root: Path, model_dir: Path, out: Path, template: str = "qwen") -> dict:
    train, test = classification_data(root)
    return {"model_name_or_path": str(model_dir), "dataset": str(train), "eval_dataset": str(test),
            "template": template, "label_names": LABELS, "prompt_template": PROMPT, "cutoff_len": 160,
            "output_dir": str(out), "bf16": False, "seed": 0}


def learned_classification_run(root: Path, model_dir: Path, out: Path, template: str = "empty") -> Path:
    """A classification run that really learned the task (accuracy 1.0 on its data): the tied embedding / output
    head trains too (a random tiny model's head is too weak for LoRA alone), 100 full-batch steps at 5e-3."""
    keys = {**classification_keys(root, model_dir, out, template=template), "additional_target": "embed_tokens"}
    return make_run(out, keys, random_b=False, train_steps=100, lr=5e-3)


def make_run(out: Path, keys: dict, random_b: bool = True, train_steps: int = 0, lr: float = 2e-2,
             b_scale: float = 0.3) -> Path:
    """A run folder as `steadytune train` writes it, from config `keys`; the adapter gets random B (random_b) or
    `train_steps` full-batch AdamW steps on the run's training data."""
    cfg = load_config(None, keys)
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    torch.manual_seed(cfg.train.seed)
    model = attach_adapter(model, cfg)
    if random_b:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name or "modules_to_save" in name:
                    param.add_(torch.randn_like(param) * b_scale)
    if train_steps:
        from steadytune.data.collators import PadCollator
        from steadytune.data.prepare import prepare_datasets
        from steadytune.training.loss import causal_lm_loss_sum

        data = prepare_datasets(cfg, tokenizer)
        batch = PadCollator(tokenizer.pad_token_id)(data.train)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        for _ in range(train_steps):
            loss, n = causal_lm_loss_sum(model, batch)
            (loss / n).backward()
            optimizer.step()
            optimizer.zero_grad()
    elif cfg.data.dataset:
        from steadytune.data.prepare import prepare_datasets
        prepare_datasets(cfg, tokenizer)  # resolves label_names / prompt_template into cfg as training does
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_resolved_config(cfg, out / "run_config.yaml")
    (out / "train_results.json").write_text(json.dumps({"global_step": train_steps}), encoding="utf-8")
    write_run_card(out, cfg.model.model_name_or_path)
    return out


def make_full_run(out: Path, keys: dict) -> Path:
    """A full fine-tune's output folder: the whole model (perturbed) + tokenizer + run_config.yaml."""
    cfg = load_config(None, {**keys, "finetuning_type": "full"})
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_resolved_config(cfg, out / "run_config.yaml")
    write_run_card(out, cfg.model.model_name_or_path)
    return out


def hold_lock(folder, pid: int, host: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(),
                                           "started": "2026-01-01T00:00:00+0000"}), encoding="utf-8")
