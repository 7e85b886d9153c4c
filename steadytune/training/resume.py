"""Is a resume the same run? The keys a checkpoint was trained with, against the keys of the run resuming it.

A checkpoint stores the run's resolved keys (`trainer_state.json` -> extra.config). On resume, a key that changes
what is trained (learning rate, data, seed, LoRA shape, cutoff_len, ...) would splice another run onto this curve,
so it is refused, naming each key with old -> new. Keys that only change bookkeeping or how long the run goes
(max_steps, save_steps, logging_steps, ...) may change: they are applied and recorded.

The training data is part of the run too: each `dataset` file is recorded as `dataset_file.NAME` (its path, size
and SHA-256), so a file rewritten under the same dataset name is refused like a changed key, naming the file.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from steadytune.config import NESTED_SECTIONS, RunConfig
from steadytune.data.registry import resolve_datasets

# Keys that may differ on resume: bookkeeping, run length, evaluation, kernels with the same numbers, the guard's
# policy, and the precision (the guard's fp16 -> bf16/fp32 switch resumes with other precision keys).
MAY_CHANGE = frozenset({
    "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "max_steps", "num_train_epochs", "save_steps",
    "save_total_limit", "save_only_model", "logging_steps", "logging_dir", "eval_steps", "eval_strategy",
    "per_device_eval_batch_size", "metric_for_best_model", "eval_dataset", "max_eval_samples", "plot_loss", "report_to",
    "do_eval", "do_predict", "predict_with_generate", "max_new_tokens", "ddp_timeout", "dataloader_num_workers",
    "preprocessing_num_workers", "overwrite_cache", "tokenized_path", "cache_dir", "gradient_checkpointing",
    "gradient_checkpointing_kwargs", "use_reentrant_gc", "torch_compile", "use_liger_kernel", "cuda_graphs",
    "kernel_tuning", "recompute_pointwise",
    "flash_attn",
    "bf16", "fp16", "trust_remote_code", "hang_timeout",
    # How the same step is spread over GPUs (the step's examples stay; distributed/world_resume.py).
    "deepspeed", "fsdp", "fsdp_config", "fsdp_version",
    # LLaMA-Factory keys with no effect on the curve here: whether to train (a resume does), the tracker's run
    # name, AdamW fused or not (the same update), checkpointing switched off under LLaMA-Factory's name.
    "do_train", "run_name", "optim", "disable_gradient_checkpointing",
})
MAY_CHANGE_SECTIONS = frozenset({"guard", "fault_injection"})


def resume_fingerprint(cfg: RunConfig) -> dict[str, Any]:
    """The run's keys as plain JSON values (nested sections as `section.key`)."""
    flat = {}
    everything = cfg.to_dict()
    for key, value in everything.items():
        if key == "decisions":
            continue
        if key in NESTED_SECTIONS and isinstance(value, dict):
            for sub, sub_value in value.items():
                flat[f"{key}.{sub}"] = sub_value
        else:
            flat[key] = value
    flat.update(dataset_files(cfg.data.dataset, cfg.data.dataset_dir))
    return json.loads(json.dumps(flat, default=str))


def dataset_files(names: str | None, dataset_dir: str) -> dict[str, str]:
    """`dataset_file.NAME` -> 'PATH: N bytes, sha256 HEX' for each training dataset read from local files (a
    folder: its files together); built-in and hub datasets have no file here and are not recorded."""
    out = {}
    for source in resolve_datasets(names, dataset_dir):
        path = Path(source.origin)
        if source.origin.startswith("hub:") or not path.exists():
            continue
        if path.is_dir():  # its files by relative path, each by its SHA-256
            digest, size = hashlib.sha256(), 0
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                digest.update(f"{f.relative_to(path)}\0{_sha256_of(f)}\n".encode())
                size += f.stat().st_size
            hexdigest = digest.hexdigest()
        else:
            size, hexdigest = path.stat().st_size, _sha256_of(path)
        out[f"dataset_file.{source.name}"] = f"{path}: {size:,} bytes, sha256 {hexdigest}"
    return out


def _sha256_of(path: Path) -> str:
    stat = path.stat()
    return _file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """One read per file version in a process (a resume fingerprints the data twice: to check and to record)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compare_for_resume(saved: dict[str, Any] | None, current: dict[str, Any]) -> tuple[list[str], list[str]]:
    """-> (refused, applied): 'key: old -> new' for every key that differs. Keys the checkpoint does not know
    (written by an older version) are not compared."""
    refused, applied = [], []
    if not saved:
        return refused, applied
    for key in sorted(set(saved) & set(current)):
        old, new = saved[key], current[key]
        if _same(old, new):
            continue
        line = f"{key}: {old!r} -> {new!r}"
        section = key.split(".", 1)[0] if "." in key else None
        if key in MAY_CHANGE or section in MAY_CHANGE_SECTIONS:
            applied.append(line)
        else:
            refused.append(line)
    return refused, applied


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b

