"""What a run prints before its first step: the derived numbers (trainable parameters, tokens and examples per step,
steps, processes, class balance) and every decision with its reason, so a wrong set-up shows before it costs hours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steadytune.config import RunConfig
from steadytune.data.balance import majority_share


def startup_lines(cfg: RunConfig, info: Any, data: Any, world: int, rank: int, trainable: int, total: int,
                  total_steps: int, several_processes: bool, watchdog: str, resume_from: Path | None) -> list[str]:
    t = cfg.train
    groups = world // t.cp_size   # sequence parallelism: the cp_size processes of a group share micro-batches
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * groups
    mean_len = sum(len(x["input_ids"]) for x in data.train) / len(data.train)
    ranks = (f"x {groups} group{'s' if groups > 1 else ''} of {t.cp_size} ranks" if t.cp_size > 1 else
             f"x {world} rank{'s' if world > 1 else ''}")
    lines = [
        f"steadytune train -> {t.output_dir}",
        f"  model        {cfg.model.model_name_or_path} ({cfg.method.finetuning_type}); trainable "
        f"{trainable:,} of {total:,} parameters ({100 * trainable / max(total, 1):.3f}%)",
        f"  hardware     {info.backend}" + (f", {info.primary.name} ({info.primary.arch})" if info.primary else "")
        + (f", {world} processes" if world > 1 else ""),
        f"  data         {len(data.train):,} training examples (mean {mean_len:.0f} tokens)"
        + (f", {len(data.eval):,} eval" if data.eval else ""),
        f"  batch        per rank {t.per_device_train_batch_size} x {t.gradient_accumulation_steps} accumulation; "
        f"{ranks} = {effective} examples (~{effective * mean_len:,.0f} tokens) per step; {total_steps} steps",
    ]
    budget = cfg.decisions.get("max_tokens_per_batch", {}).get("value")
    if budget:
        tokens = budget * t.gradient_accumulation_steps * groups
        lines[-1] = (f"  batch        per rank {budget:,} tokens x {t.gradient_accumulation_steps} accumulation; "
                     f"{ranks} = {tokens:,} tokens (~{tokens / mean_len:.0f} examples) per step; {total_steps} steps")
    if several_processes:
        lines.append(f"  processes    world size {world} (this is rank {rank}); hang watchdog {watchdog}")
    if data.label_names:
        for split in ("train", "eval"):
            counts = data.class_counts.get(split)
            if counts:
                lines.append(f"  {split + ' classes':<12} {counts}; majority baseline {majority_share(counts):.3f}")
        lines.append(f"  class_balance {cfg.data.class_balance}")
    for key, decision in cfg.decisions.items():
        value = decision["value"]
        shown = "" if isinstance(value, (dict, list)) else f"{value}  "
        lines.append(f"  {key:<12} {shown}({decision['reason']})")
    if resume_from is not None:
        lines.append(f"  resume       from {resume_from}")
    return lines
