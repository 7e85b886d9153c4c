"""One loader for inference: `eval`, `demo`, `chat`, `predict` and `export` all load a trained run through here.

A run is named three ways, and each becomes a `Run` (its config, the folder training left, and what that
folder is):
- CONFIG: the YAML it was trained with (or a LLaMA-Factory inference / merge_lora YAML): the trained folder is
  `adapter_name_or_path`, else `output_dir` when the config sets it; a YAML naming only a model is that model.
- RUN_DIR: the output folder of `steadytune train` (run_config.yaml + adapter or model), an exported merged
  folder, or any Hugging Face model folder.
- ARCHIVE: the `.tar.gz` of `steadytune export --archive`, verified against its manifest and unpacked first.

A run folder or an archive may come from anyone, so its run_config.yaml (and any config file in a run folder, named
as CONFIG) is read for what the run was (base model, template, labels, generation settings), never for what it may
do on this machine: code, credentials and write targets come from the user's own command line
(training/folder_config.py), and a file asking for one is said, naming the file, and not obeyed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from steadytune.config import RunConfig, load_config, read_yaml
from steadytune.errors import UserError
from steadytune.hardware.backend import detect, device_for
from steadytune.hardware.policy import choose_attention, choose_precision
from steadytune.model.anatomy import CAUSAL_LM
from steadytune.model.archive import is_archive, unpacked
from steadytune.model.attention import eager_only_reason
from steadytune.model.load import load_model_and_tokenizer
from steadytune.model.lora import load_trained_adapter
from steadytune.model.quantize import dequantize_base, describe_quantization, is_quantized
from steadytune.training.folder_config import RUN_CONFIG, load_config_named, load_folder_config

LORA, MODEL, BASE = "lora", "model", "base"  # adapter on its base | the folder is the model | the base alone
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass
class Run:
    cfg: RunConfig
    folder: Optional[Path]   # the adapter (LORA) or model (MODEL) folder; None for BASE
    kind: str
    origin: str              # what the user named, for messages

    @property
    def is_classification(self) -> bool:
        return bool(self.cfg.data.label_names)

    def describe(self) -> str:
        base = self.cfg.model.model_name_or_path
        where = self.origin if is_archive(Path(self.origin)) else self.folder  # an archive, not its cache folder
        return {LORA: f"adapter {where} on {base}", MODEL: f"model {where}",
                BASE: f"model {base} (no adapter)"}[self.kind]


def open_run(source: str, overrides: list[str] | None = None) -> Run:
    """CONFIG | RUN_DIR | ARCHIVE -> Run, with `key=value` overrides applied to the run's config."""
    path = Path(source).expanduser()
    overrides = list(overrides or [])
    if path.is_file() and is_archive(path):
        return _run_from_folder(unpacked(path), overrides, origin=str(path))
    if path.is_dir():
        return _run_from_folder(path, overrides, origin=str(path))
    if path.is_file() and path.suffix.lower() in (".yaml", ".yml"):
        return _run_from_config(path, overrides)
    if not path.exists():
        raise UserError(f"{source}: not found (expected a config .yaml, a run folder or an archive .tar.gz)")
    raise UserError(f"{source}: not a config (.yaml), a run folder or an adapter archive (.tar.gz)")


def _run_from_folder(folder: Path, overrides: list[str], origin: str) -> Run:
    has_adapter = (folder / "adapter_config.json").is_file()
    has_model = (folder / "config.json").is_file()
    if not (has_adapter or has_model):
        raise UserError(f"{origin}: holds no trained adapter (adapter_config.json) or model (config.json)")
    if (folder / RUN_CONFIG).is_file():
        cfg = load_run_config(folder, overrides, origin)
    else:
        cfg = load_config(None, overrides)
        if has_adapter and "model_name_or_path" not in cfg.user_keys:
            # A bare peft folder: its base is what adapter_config.json names (portable since steadytune writes the
            # alias or hub id there; see card.portable_base).
            adapter_config = folder / "adapter_config.json"
            try:
                base = json.loads(adapter_config.read_text(encoding="utf-8")).get("base_model_name_or_path")
            except (OSError, ValueError, RecursionError, AttributeError):
                raise UserError(f"{adapter_config}: not a readable JSON object (or nested too deeply); the folder is "
                                "damaged") from None
            if not base:
                raise UserError(f"{origin}: adapter_config.json names no base model; pass model_name_or_path=...")
            cfg.model.model_name_or_path = str(base)
    if has_adapter:
        cfg.model.adapter_name_or_path = str(folder)
        return Run(cfg, folder, LORA, origin)
    cfg.model.model_name_or_path = str(folder)
    cfg.model.adapter_name_or_path = None
    return Run(cfg, folder, MODEL, origin)


def load_run_config(folder: Path, overrides: list[str] | None, origin: str) -> RunConfig:
    """The run_config.yaml of a run folder or an unpacked archive (named `origin` in messages) with `overrides`, granting
    nothing it asks for that the overrides (the user's command line) do not give (training/folder_config.py)."""
    return load_folder_config(folder / RUN_CONFIG, overrides, origin, runs_rewards=False)


def _run_from_config(path: Path, overrides: list[str]) -> Run:
    cfg = load_config_named(path, overrides, runs_rewards=False)   # a run folder's file grants nothing
    if cfg.model.adapter_name_or_path:
        folder, kind = trained_folder(cfg)
    elif "output_dir" in cfg.user_keys and _holds_weights(Path(cfg.train.output_dir)):
        folder, kind = trained_folder(cfg)
    elif cfg.data.dataset and "output_dir" in cfg.user_keys:
        raise UserError(f"{path}: output_dir {cfg.train.output_dir} holds no trained adapter or model yet; train "
                        f"first (steadytune train {path}), or set adapter_name_or_path")
    else:
        # A LLaMA-Factory inference or merge YAML naming only a model (a base, or a full fine-tune's folder).
        return Run(cfg, None, BASE, str(path))
    _fill_task_from_run(cfg, folder)
    if kind == MODEL:
        cfg.model.model_name_or_path = str(folder)
    return Run(cfg, folder, kind, str(path))


def _holds_weights(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file() or (folder / "config.json").is_file()


def _fill_task_from_run(cfg: RunConfig, folder: Path) -> None:
    """A config whose labels came from dataset_info.json does not spell them out; the run's own record does."""
    record = folder / RUN_CONFIG
    if cfg.data.label_names or not record.is_file():
        return
    saved = read_yaml(record)
    if saved.get("label_names"):
        cfg.data.label_names = [str(x) for x in saved["label_names"]]
        cfg.data.prompt_template = cfg.data.prompt_template or saved.get("prompt_template")


def trained_folder(cfg: RunConfig) -> tuple[Path, str]:
    """(folder, LORA | MODEL): what training left in adapter_name_or_path (default: output_dir); an archive there
    is verified and unpacked."""
    key = "adapter_name_or_path" if cfg.model.adapter_name_or_path else "output_dir"
    folder = unpacked(cfg.model.adapter_name_or_path or cfg.train.output_dir)
    if (folder / "adapter_config.json").is_file():
        return folder, LORA
    if (folder / "config.json").is_file():
        return folder, MODEL
    raise UserError(f"{key}: {folder} holds no trained adapter (adapter_config.json) or model (config.json); "
                    "train first, or set adapter_name_or_path to the adapter folder or archive")


def inference_dtype(cfg: RunConfig, info: Any) -> tuple[torch.dtype, str]:
    """infer_dtype, or under `auto` the precision `train` would pick on this hardware."""
    if cfg.infer.infer_dtype != "auto":
        return DTYPES[cfg.infer.infer_dtype], f"infer_dtype: {cfg.infer.infer_dtype}"
    precision, why = choose_precision(info, cfg.train.bf16, cfg.train.fp16)
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32), why


def load_for_inference(cfg: RunConfig, device: torch.device | None = None, dtype: torch.dtype | None = None,
                       task: str = CAUSAL_LM) -> tuple[torch.nn.Module, Any, torch.device, str]:
    """(model, tokenizer, device, description) of `model_name_or_path` for scoring or generation, in eval mode, on
    the device, dtype and attention the hardware policy picks for this config (the choices `train` makes) unless
    `device` / `dtype` are given. task: model.CAUSAL_LM, or model.SEQUENCE_SCORE for a reward model."""

    info = detect()
    if dtype is None:
        dtype, why = inference_dtype(cfg, info)
    else:
        why = "asked for"
    attn, _ = choose_attention(info, cfg.model.flash_attn)
    if eager_only_reason(cfg.model.model_name_or_path):   # gpt-oss: its attention sinks run only eagerly, as in train
        attn = "eager"
    device = device or device_for(info)
    model, tokenizer = load_model_and_tokenizer(cfg.model, dtype, attn, device, task=task)
    model.eval()
    name = str(dtype).replace("torch.", "")
    return model, tokenizer, device, f"device {device}, {name} ({why}), attention {attn}"


def load_trained(cfg: RunConfig, folder: Path | None, kind: str, device: torch.device | None = None,
                 dtype: torch.dtype | None = None, quiet: bool = False,
                 task: str = CAUSAL_LM, dequantize: bool = False) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) of a trained run's `folder` (LORA: the adapter on the base model; MODEL: the folder is the
    model; BASE: model_name_or_path alone) on the device and dtype the hardware policy picks. task: CAUSAL_LM, or
    SEQUENCE_SCORE for a reward model (stage rm).

    A QLoRA run (quantization_bit in its run_config.yaml) loads its base quantised again, as it was trained: the
    adapter learned against the quantised weights, so chat / predict / eval / serve see the numbers training saw, in
    the memory training needed (quantization_bit=null on the command line loads the unquantised base instead).
    `dequantize`: decode the quantised base to plain weights in `dtype` before the adapter goes on (export's merge)."""

    if kind == MODEL:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, model_name_or_path=str(folder)))
    model, tokenizer, _, description = load_for_inference(cfg, device, dtype, task=task)
    if is_quantized(model):
        description += f", base {describe_quantization(cfg.model)} (as trained: quantization_bit in its config)"
        if dequantize:
            model = dequantize_base(model, dtype or torch.float32)
            description += f", dequantised to {str(dtype or torch.float32).replace('torch.', '')}"
    if not quiet:
        print(description)
    if kind == LORA:
        model = load_trained_adapter(model, folder, allow_pickle=cfg.model.allow_pickle_weights)
        model.eval()
    return model, tokenizer


def load_run(run: Run, device: torch.device | None = None, dtype: torch.dtype | None = None,
             quiet: bool = False, dequantize: bool = False) -> tuple[torch.nn.Module, Any]:
    return load_trained(run.cfg, run.folder, run.kind, device, dtype, quiet, dequantize=dequantize)
