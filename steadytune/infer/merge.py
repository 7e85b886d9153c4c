"""Fold a trained adapter into its base and save a Hugging Face folder that any tool loads as a plain model.

peft's `merge_and_unload` does the merge for every variant we train (LoRA, rsLoRA's scaling, DoRA's magnitude
vector, and `additional_target` modules, whose trained copies replace the originals). The merge runs in fp32
(the adapter's and the base's precision do not round each other away); the weights are cast to the export dtype
only when saved.

The saved folder carries what makes it behave like the run: the tokenizer with the run's chat template (so
`apply_chat_template` gives the training prompt), `generation_config.json` whose stop tokens include the
template's end-of-turn token, `run_config.yaml`, `base_model.json` and a model card.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from steadytune.errors import UserError
from steadytune.infer.generate import chat_template_of, stop_token_ids
from steadytune.infer.loading import DTYPES

WEIGHT_PATTERNS = ("model*.safetensors", "model.safetensors.index.json")


def merge_adapter(model: torch.nn.Module) -> torch.nn.Module:
    """The plain transformers model with the adapter folded in (a model without adapter is returned as is)."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        return model
    merged = model.merge_and_unload(progressbar=False)
    # A trained copy of tied embeddings (additional_target: embed_tokens) must drive the output head as well.
    text_config = merged.config.get_text_config() if hasattr(merged.config, "get_text_config") else merged.config
    if getattr(text_config, "tie_word_embeddings", False):
        merged.tie_weights()
    return merged


def saved_dtype(folder: Path) -> torch.dtype | None:
    """The dtype a model folder's config.json states (`dtype`, or transformers 4's `torch_dtype`)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    name = config.get("dtype") or config.get("torch_dtype")
    return getattr(torch, name, None) if isinstance(name, str) else None


def choose_export_dtype(infer_dtype: str, stored: torch.dtype | None, hardware_precision: str) -> tuple[torch.dtype, str]:
    """LLaMA-Factory's rule: `infer_dtype` when set; under auto the model's own dtype, except that an fp32 model
    is saved in bf16 where this machine computes in bf16."""

    if infer_dtype != "auto":
        return DTYPES[infer_dtype], f"infer_dtype: {infer_dtype}"
    if stored in (torch.bfloat16, torch.float16):
        return stored, f"the base model's own dtype ({str(stored).replace('torch.', '')})"
    if hardware_precision == "bf16":
        return torch.bfloat16, "the base model is fp32; this machine computes in bf16 (LLaMA-Factory's rule)"
    return torch.float32, "the base model's own dtype (float32); infer_dtype=bfloat16 halves the files"


def check_export_dir(folder: Path, overwrite: bool) -> None:
    """Nothing a user made is overwritten: a non-empty export_dir needs --force, and then only our files go."""
    if not folder.exists() or not any(folder.iterdir()):
        return
    if not overwrite:
        raise UserError(f"export_dir: {folder} is not empty; choose another folder or pass --force to replace the "
                        "exported files in it")
    for pattern in WEIGHT_PATTERNS:  # stale shards of an earlier, larger export would shadow the new index
        for stale in folder.glob(pattern):
            stale.unlink()


def save_merged(model: torch.nn.Module, tokenizer: Any, template, out_dir: Path, dtype: torch.dtype,
                shard_gb: float, generation: dict) -> list[Path]:
    """Save the merged model (sharded safetensors), tokenizer + chat template and generation_config.json."""
    model = model.to(dtype)
    model.config.dtype = dtype
    # LLaMA-Factory's unit is GB (its "5" is save_pretrained's "5GB"); transformers takes bytes as an int.
    model.save_pretrained(out_dir, max_shard_size=max(1, int(shard_gb * 1000**3)))
    for weights in out_dir.glob("model*.safetensors"):  # transformers leaves them owner-only; an export is shared
        weights.chmod(0o644)

    # The tokenizer as the run used it, with its template as chat_template, padding on the left for batched
    # generation (as LLaMA-Factory exports it).
    tokenizer.chat_template = chat_template_of(template)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(out_dir)
    tokenizer.padding_side = "right"

    from transformers import GenerationConfig

    config = model.generation_config if getattr(model, "generation_config", None) is not None else GenerationConfig()
    config = GenerationConfig.from_dict({**config.to_dict(), **generation})
    stops = stop_token_ids(template, tokenizer)
    config.eos_token_id = stops if len(stops) > 1 else (stops[0] if stops else None)
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.save_pretrained(out_dir)
    return sorted(p for p in out_dir.iterdir() if p.is_file())


def copy_run_records(run_folder: Path | None, out_dir: Path) -> None:
    """run_config.yaml and the results files next to the merged model, so predict/chat/eval know the task."""
    if run_folder is None:
        return
    for name in ("run_config.yaml", "eval_results.json", "train_results.json", "demo_results.json", "base_model.json"):
        if (run_folder / name).is_file():
            shutil.copy2(run_folder / name, out_dir / name)
