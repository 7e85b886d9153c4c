"""`deepspeed: FILE.json`: read a DeepSpeed config as users write it (LLaMA-Factory's ds_z0/z2/z3(_offload) files,
seed 001's ds_z3_rocm.json), name unknown or misspelled keys before anything loads, and fill its "auto" values from
the run's keys the way transformers' HfTrainerDeepSpeedConfig does.

What steadytune changes in the config it hands to DeepSpeed, and why:
- gradient_accumulation_steps is 1 and train_batch_size is micro batch x processes: the recipe accumulates itself
  (token-normalised over the whole window) and tells the engine which micro-batch ends a window, so DeepSpeed must
  not divide the loss by the accumulation count a second time. The file's values are still checked against the run.
- zero_allow_untested_optimizer is true, as transformers sets it: the optimizer is steadytune's torch AdamW.
- with ZeRO-Offload of the optimizer, zero_force_ds_cpu_optimizer is false: torch's AdamW steps the CPU copies
  (DeepSpeedCPUAdam would need its C++ op built on this machine).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadytune.distributed.deepspeed_keys import DEEPSPEED_VERSION, HINTS, REMOVED, SECTIONS, VALIDATED_BY_DEEPSPEED
from steadytune.errors import UserError


@dataclass
class DeepSpeedFile:
    """A DeepSpeed config as read from its file, checked; `config` is a copy the run may fill in."""
    path: Path
    config: dict
    warnings: list[str] = field(default_factory=list)

    @property
    def stage(self) -> int:
        value = self.config.get("zero_optimization", {}).get("stage", 0)
        return int(value) if isinstance(value, (int, float)) else 0

    @property
    def offload(self) -> list[str]:
        """What ZeRO-Offload moves to the CPU (or NVMe): 'optimizer', 'parameters'."""
        zero = self.config.get("zero_optimization", {})
        moved = []
        for key, name in (("offload_optimizer", "optimizer"), ("offload_param", "parameters")):
            device = (zero.get(key) or {}).get("device", "none")
            if device not in (None, "none"):
                moved.append(f"{name} to {device}")
        return moved

    def label(self) -> str:
        offload = f", offload {' and '.join(self.offload)}" if self.offload else ""
        return f"DeepSpeed ZeRO-{self.stage}{offload}"

    def requested_precision(self) -> str | None:
        """fp16 / bf16 / fp32 when the file says so explicitly (not "auto"), else None."""
        def enabled(section: str) -> Any:
            block = self.config.get(section)
            return block.get("enabled", "auto") if isinstance(block, dict) else "auto"
        fp16, bf16 = enabled("fp16"), enabled("bf16") if "bf16" in self.config else enabled("bfloat16")
        if fp16 is True:
            return "fp16"
        if bf16 is True:
            return "bf16"
        if fp16 is False and bf16 is False and "fp16" in self.config and ("bf16" in self.config or "bfloat16" in self.config):
            return "fp32"
        return None


def read_deepspeed_file(path: str | Path) -> DeepSpeedFile:
    """Parse and check a DeepSpeed JSON file; UserError names the file and the key (with a did-you-mean)."""
    path = Path(path)
    where = f"deepspeed: {path}"
    if not path.is_file():
        raise UserError(f"{where}: file not found")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{where}: cannot read ({e})") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply to be a DeepSpeed config") from None
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a JSON object of DeepSpeed settings")
    return DeepSpeedFile(path, raw, check_keys(raw, where))


def check_keys(config: dict, where: str) -> list[str]:
    """Every key against DeepSpeed's table (deepspeed_keys.py). Raises UserError for keys DeepSpeed would refuse
    later (inside the sections it validates, removed features) and for likely misspellings of a known key; returns
    warnings for unknown keys DeepSpeed would silently ignore."""
    errors, warnings = [], []
    for section, key, value in _walk(config):
        if key.startswith("_"):
            continue  # a comment ("_comment" in LLaMA-Factory's files)
        dotted = f"{section}.{key}" if section else key
        if dotted in REMOVED:
            errors.append(f"{dotted}: no longer a DeepSpeed key ({REMOVED[dotted]})")
            continue
        known = SECTIONS.get(section)
        if known is None or key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        hint = HINTS.get(dotted)
        line = f"{dotted}: not a DeepSpeed {DEEPSPEED_VERSION} key" + (f" ({hint})" if hint else "") + (
            f"; did you mean {close[0]!r}?" if close else "")
        if close or section in VALIDATED_BY_DEEPSPEED:
            what = ("DeepSpeed refuses it when the engine starts" if section in VALIDATED_BY_DEEPSPEED
                    else "DeepSpeed would ignore it without a word")
            errors.append(f"{line} ({what})")
        else:
            warnings.append(f"{line}; DeepSpeed ignores it")
    if errors:
        raise UserError(f"{where}: " + "; ".join(errors))
    return [f"{where}: {w}" for w in warnings]


def _walk(config: dict, section: str = ""):
    """(section, key, value) for every key of `config` and of its known sub-sections."""
    for key, value in config.items():
        yield section, key, value
        child = f"{section}.{key}" if section else key
        if isinstance(value, dict) and child in SECTIONS and SECTIONS[child] is not None:
            yield from _walk(value, child)


# ---------------------------------------------------------------------------------------------------------
# "auto" values, as transformers fills them (HfTrainerDeepSpeedConfig.trainer_config_process / _finalize)
# ---------------------------------------------------------------------------------------------------------

def fill_from_run(ds: DeepSpeedFile, train, precision: str, world_size: int, cpu: bool = False) -> list[str]:
    """Fill the run-dependent "auto" values and check explicit ones against the run (a mismatch is an error, as in
    transformers). `train`: the train section. Returns one line per value filled or changed, for the start-up print."""
    config, notes, mismatches = ds.config, [], []
    if "optimizer" in config or "scheduler" in config:
        section = "optimizer" if "optimizer" in config else "scheduler"
        raise UserError(f"deepspeed: {ds.path}: the {section} block is not used by steadytune: it hands DeepSpeed its "
                        "own AdamW and schedule (learning_rate, adam_beta1/2, adam_epsilon, weight_decay, "
                        f"lr_scheduler_type, warmup_*); remove the {section} block")
    global_batch = train.per_device_train_batch_size * train.gradient_accumulation_steps * world_size

    def match(key: str, value: Any, ours: str) -> None:
        section, _, name = key.rpartition(".")
        block = _node(config, section)
        if block is None:
            return
        given = block.get(name)
        if given == "auto" or (given is None and section == "" and name in _ALWAYS_SET):
            block[name] = value
            notes.append(f"{key} = {value} ({ours})")
        elif given is not None and not _same(given, value):
            mismatches.append(f"{key} is {given!r} but {ours} is {value!r}")

    match("train_micro_batch_size_per_gpu", train.per_device_train_batch_size, "per_device_train_batch_size")
    match("gradient_accumulation_steps", train.gradient_accumulation_steps, "gradient_accumulation_steps")
    match("train_batch_size", global_batch, f"per_device_train_batch_size x gradient_accumulation_steps x "
                                            f"{world_size} processes")
    match("gradient_clipping", train.max_grad_norm, "max_grad_norm")
    bf16_section = "bfloat16" if "bfloat16" in config and "bf16" not in config else "bf16"
    for section, dtype in (("fp16", "fp16"), (bf16_section, "bf16")):
        block = config.setdefault(section, {})
        if not isinstance(block, dict):
            raise UserError(f"deepspeed: {ds.path}: {section} must be an object such as {{\"enabled\": \"auto\"}}")
        block.setdefault("enabled", "auto")
        if cpu and block["enabled"] is True:
            # As for the run's own bf16/fp16 keys: on a CPU the same file trains in fp32 (hardware.choose_precision).
            block["enabled"] = False
            notes.append(f"{section}.enabled = false (no GPU: fp32)")
        match(f"{section}.enabled", precision == dtype, f"this run trains in {precision}")
    if mismatches:
        raise UserError(f"deepspeed: {ds.path}: values that disagree with the run: {'; '.join(mismatches)}; set "
                        "them to \"auto\" in the file, or change the run's keys to match")
    # What the engine really gets: the recipe accumulates and tells DeepSpeed where a window ends (module docstring).
    config["gradient_accumulation_steps"] = 1
    config["train_batch_size"] = train.per_device_train_batch_size * world_size
    zero = config.get("zero_optimization")
    if isinstance(zero, dict) and zero.get("round_robin_gradients") is True and ds.stage in (1, 2):
        # Measured with DeepSpeed 0.19.8: with it on, the fragment API that gathers a checkpoint's fp32 weights
        # (safe_get_full_fp32_param) returns the wrong elements; it only spreads gradient copies to CPU offload.
        zero["round_robin_gradients"] = False
        notes.append("zero_optimization.round_robin_gradients = false (with it, DeepSpeed's fragment API gathers the "
                     "wrong fp32 weights for checkpoints; it only parallelises gradient copies for CPU offload)")
    if ds.stage > 0 and config.get("zero_allow_untested_optimizer") is not True:
        config["zero_allow_untested_optimizer"] = True
        notes.append("zero_allow_untested_optimizer = true (the optimizer is torch's AdamW, as with transformers)")
    if any(item.startswith("optimizer") for item in ds.offload):
        if config.get("zero_force_ds_cpu_optimizer") is True:
            raise UserError(f"deepspeed: {ds.path}: zero_force_ds_cpu_optimizer: true needs DeepSpeedCPUAdam; "
                            "steadytune steps the offloaded optimizer with torch's AdamW: remove the key")
        config["zero_force_ds_cpu_optimizer"] = False
        notes.append("zero_force_ds_cpu_optimizer = false (torch's AdamW steps the offloaded CPU copies)")
    return notes


_ALWAYS_SET = ("train_micro_batch_size_per_gpu", "gradient_clipping")


def fill_from_model(ds: DeepSpeedFile, model_config) -> list[str]:
    """The hidden-size "auto" values (transformers' trainer_config_finalize): bucket sizes and the ZeRO-3
    persistence threshold."""
    zero = ds.config.get("zero_optimization")
    if not isinstance(zero, dict):
        return []
    keys = ["reduce_bucket_size"] + (["stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"]
                                     if ds.stage == 3 else [])
    wanted = [k for k in keys if zero.get(k) == "auto"]
    if not wanted:
        return []
    hidden = hidden_size_of(model_config)
    if hidden is None:
        raise UserError(f"deepspeed: {ds.path}: the model's config has no hidden_size, so "
                        f"zero_optimization.{', '.join(wanted)} cannot be filled from \"auto\": give numbers")
    values = {"reduce_bucket_size": hidden * hidden, "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
              "stage3_param_persistence_threshold": 10 * hidden}
    notes = []
    for key in wanted:
        zero[key] = values[key]
        notes.append(f"zero_optimization.{key} = {values[key]:,} (from hidden_size {hidden})")
    return notes


def leftover_auto(ds: DeepSpeedFile) -> list[str]:
    """"auto" values nothing filled: DeepSpeed would fail on them."""
    return [f"{section + '.' if section else ''}{key}" for section, key, value in _walk(ds.config) if value == "auto"]


def hidden_size_of(model_config) -> int | None:
    config = getattr(model_config, "text_config", None) or model_config
    for source in (model_config, config):
        size = getattr(source, "hidden_size", None)
        if isinstance(size, int):
            return size
        sizes = getattr(source, "hidden_sizes", None)
        if sizes:
            return max(sizes)
    return None


def _node(config: dict, section: str) -> dict | None:
    node = config
    for part in filter(None, section.split(".")):
        node = node.get(part)
        if not isinstance(node, dict):
            return None
    return node


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b
