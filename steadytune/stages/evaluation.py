"""Evaluating a preference stage: its loss and metrics (rewards/chosen, rewards/rejected, rewards/margins,
rewards/accuracies, ...) over the eval split, during training and on the saved result.

During training the objective being trained is used as it is. After training (`do_eval: true`, or
`steadytune eval CONFIG` with a dpo/kto/rm config) the saved output is loaded back first: the adapter onto the base
model, or the full model from output_dir; the reference of DPO/KTO is rebuilt as in training. The results go to
eval_results.json in the output folder, as for sft.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import torch

from steadytune.config import RunConfig
from steadytune.errors import UserError
from steadytune.stages.batches import SequenceCollator
from steadytune.stages.objectives import pop_metrics


@torch.no_grad()
def evaluate_examples(objective: torch.nn.Module, examples: list[dict], collate: Callable, batch_size: int,
                      device: torch.device, autocast=None) -> dict:
    """eval_loss (mean over pairs or answers) and the objective's eval_ metrics over `examples`."""
    objective.eval()
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v)
                 for k, v in collate(examples[start:start + batch_size]).items()}
        with autocast() if autocast is not None else contextlib.nullcontext():
            loss_sum, n = objective(batch)
        total += float(loss_sum)
        count += n
    metrics = pop_metrics(objective, evaluation=True)
    objective.train()
    return {"eval_loss": total / max(count, 1), **{f"eval_{k}": v for k, v in metrics.items()}}


def evaluate_during_training(groups, cfg: RunConfig, accelerator, objective, data, tokenizer, device) -> dict:
    """The stage's `evaluate` (bound to its collation groups): eval batches are padded, one pair per row pair."""
    collate = SequenceCollator(tokenizer.pad_token_id, groups)
    return evaluate_examples(accelerator.unwrap_model(objective), data.eval, collate,
                             cfg.train.per_device_eval_batch_size, device, accelerator.autocast)


def evaluate_trained(stage, cfg: RunConfig, batch_size: int | None = None, output_dir: str | None = None,
                     overwrite: bool = False, **_: Any) -> dict:
    """Load what training saved, evaluate it on the eval split, write eval_results.json; -> the results.
    (Options of `steadytune eval` that are about classification or generation do not apply and are ignored.)"""
    from steadytune.training.run_folder import claim_outputs, record_outputs

    out = Path(output_dir or cfg.train.output_dir)
    claim_outputs(out, ["eval_results.json"], overwrite, "steadytune eval")  # never over a file we did not write
    model, tokenizer, device = load_trained(stage, cfg)
    data = stage.prepare_data(cfg, tokenizer)
    if not data.eval:
        raise UserError("no eval split: set eval_dataset, or val_size to evaluate on the held-out part of dataset")
    objective = stage.make_objective(model, cfg)
    collate = stage.make_collator(cfg, tokenizer, None)
    results = evaluate_examples(objective, data.eval, collate, batch_size or cfg.train.per_device_eval_batch_size,
                                device)
    results["eval_examples"] = len(data.eval)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    record_outputs(out, ["eval_results.json"])
    print(f"stage {stage.name}: {len(data.eval)} eval examples -> {out / 'eval_results.json'}")
    for key, value in results.items():
        print(f"  {key:<26} {value:.4f}" if isinstance(value, float) else f"  {key:<26} {value}")
    return results


def trained_folder(cfg: RunConfig) -> tuple[Path, str]:
    """(folder, "lora" | "full") that training left: adapter_name_or_path when set, else output_dir."""
    folder = Path(cfg.model.adapter_name_or_path or cfg.train.output_dir)
    if (folder / "adapter_config.json").is_file():
        return folder, "lora"
    if (folder / "config.json").is_file():
        return folder, "full"
    raise UserError(f"{folder} holds no trained adapter (adapter_config.json) or model (config.json); train first, "
                    "or set adapter_name_or_path to the adapter folder")


def load_trained(stage, cfg: RunConfig) -> tuple[torch.nn.Module, Any, torch.device]:
    """(model, tokenizer, device) of a trained run, on the device and dtype the hardware policy picks. The
    reference model of dpo/kto is built from the *base* model of `cfg` (and its precision recorded for it)."""
    from steadytune.infer.loading import load_for_inference
    from steadytune.model.lora import load_trained_adapter

    folder, kind = trained_folder(cfg)
    source = cfg if kind == "lora" else dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, model_name_or_path=str(folder)))
    model, tokenizer, device, description = load_for_inference(source, task=stage.model_task)
    print(description)
    if kind == "lora":
        model = load_trained_adapter(model, folder)
    dtype = next(model.parameters()).dtype
    cfg.decide("precision", "bf16" if dtype == torch.bfloat16 else "fp32", "as the evaluated model was loaded")
    return model, tokenizer, device
