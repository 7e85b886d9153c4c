"""What `serve` serves: SOURCE (a run's YAML, a run folder or an adapter archive) and the `--adapter name=path` list,
resolved once at start into one base model with its adapters and, per served name, the chat template and label set to use.

All model loading of the server goes through `load_served`; nothing a request carries reaches this module (a
request's `model` only picks among the names fixed here).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from steadytune.config import RunConfig
from steadytune.errors import UserError
from steadytune.infer.loading import BASE, LORA, load_for_inference, load_run_config, open_run
from steadytune.infer.media import VisionPrompts
from steadytune.model.archive import archive_stem, is_archive, unpacked
from steadytune.model.decode.adapters import match_model_dtype
from steadytune.model.lora import load_trained_adapter
from steadytune.model.moe.targets import targets_as_written, written_for_fused_experts
from steadytune.model.saved_weights import check_checkpoint_matches
from steadytune.serve.served import Loaded, ServedRun, context_length, describe_all, describe_lines, served_entries
from steadytune.serve.vllm_engine import load_vllm

RUN_CONFIG = "run_config.yaml"  # written by `train` into its output_dir


def load_served(source: str, adapters: list[str], overrides: list[str], served_name: Optional[str] = None) -> Loaded:
    """Load SOURCE's model (and adapter), every `name=path` adapter on the same base, and describe each name."""
    main = resolve_source(source, overrides)
    extra = [_parse_adapter_arg(a) for a in adapters]
    if extra and main.kind == "full":
        raise UserError(f"--adapter needs a LoRA run or a base model as SOURCE; {source} is a full fine-tune, and "
                        "adapters trained on the base model do not fit its changed weights")
    extra_runs = [(name, _resolve_adapter(name, path, main.cfg)) for name, path in extra]
    if main.cfg.infer.infer_backend == "vllm":
        return load_vllm(main, extra_runs, served_name)
    return _load_huggingface(main, extra_runs, served_name)


# ---------------------------------------------------------------------------------------------------------
# Resolving paths
# ---------------------------------------------------------------------------------------------------------

def resolve_source(source: str, overrides: list[str]) -> ServedRun:
    """SOURCE as chat/predict/export read it (a config, a run folder, or an adapter archive: verified, unpacked)."""

    run = open_run(source, overrides)
    if run.kind == BASE:
        print(f"serve: {source} names no trained adapter or model; serving the base model "
              f"{run.cfg.model.model_name_or_path} alone")
    name = None
    if is_archive(Path(source)):  # unpacked into a cache folder named by its digest: serve it by the archive's name
        name = archive_stem(Path(source))
    return ServedRun(run.cfg, run.folder, {LORA: "lora", BASE: "base"}.get(run.kind, "full"), name)


def _parse_adapter_arg(arg: str) -> tuple[str, str]:
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise UserError(f"--adapter {arg!r}: expected name=path, e.g. --adapter sentiment=saves/sentiment")
    return name, path


def _resolve_adapter(name: str, path: str, main_cfg: RunConfig) -> ServedRun:
    """An --adapter path: a run folder (its own template and labels) or a bare adapter folder (SOURCE's)."""

    folder = unpacked(Path(path).expanduser())  # an archive: verified against its manifest, then unpacked
    if not (folder / "adapter_config.json").is_file():
        raise UserError(f"--adapter {name}={path}: no adapter_config.json there (not a LoRA adapter folder)")
    if (folder / RUN_CONFIG).is_file():
        cfg = load_run_config(folder, [], f"--adapter {name}={path}")  # never grants trust (infer.loading)
        if cfg.model.model_name_or_path != main_cfg.model.model_name_or_path:
            raise UserError(f"--adapter {name}={path}: trained on {cfg.model.model_name_or_path}, but the server's base "
                            f"model is {main_cfg.model.model_name_or_path}")
    else:
        cfg = dataclasses.replace(main_cfg)
    return ServedRun(cfg, folder, "lora")


def check_expert_targets(runs: list[ServedRun]) -> None:
    """Several adapters with LoRA on a mixture of experts' fused expert weights (peft's target_parameters) share one
    base only when they adapt the same expert weights: peft nests one ParamWrapper per adapted weight, so adapters
    with other sets cannot live side by side. Refused here, by name, before any weight is loaded."""
    first: tuple[ServedRun, list] | None = None
    for run in runs:
        targets = _target_parameters(run.folder)
        if not targets:
            continue
        if first is None:
            first = (run, targets)
        elif set(targets) != set(first[1]):
            raise UserError(f"{run.folder}: its routed-expert LoRA adapts {', '.join(sorted(targets))} but "
                            f"{first[0].folder}'s adapts {', '.join(sorted(first[1]))}: peft serves several expert "
                            "adapters on one base only when they adapt the same expert weights (target_parameters). "
                            "Serve them from separate `steadytune serve` processes, or export each merged")


def _target_parameters(folder: Optional[Path]) -> list:
    try:
        config = json.loads((Path(folder) / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, TypeError, ValueError):
        return []
    targets = config.get("target_parameters") if isinstance(config, dict) else None
    return list(targets) if isinstance(targets, list) else []


# ---------------------------------------------------------------------------------------------------------
# Loading: transformers + peft
# ---------------------------------------------------------------------------------------------------------

def _load_huggingface(main: ServedRun, extra: list[tuple[str, ServedRun]], served_name: Optional[str]) -> Loaded:

    cfg = main.cfg
    if main.kind == "full":  # the trained folder is itself the model
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, model_name_or_path=str(main.folder)))
    model, tokenizer, _, description = load_for_inference(cfg)

    adapter_runs = ([main] if main.kind == "lora" else []) + [run for _, run in extra]
    peft_names: list[str] = []
    if adapter_runs:
        check_expert_targets(adapter_runs)
        for run in adapter_runs[1:]:  # refused before any weight is loaded
            check_checkpoint_matches(run.folder, model)
        model = load_trained_adapter(model, adapter_runs[0].folder, allow_pickle=cfg.model.allow_pickle_weights)
        peft_names.append(model.active_adapter)
        for i, run in enumerate(adapter_runs[1:], start=1):
            peft_names.append(f"adapter{i}")
            # An adapter for transformers 5's fused experts is read as written (model/moe/targets.py).
            with targets_as_written(written_for_fused_experts(run.folder)):
                model.load_adapter(str(run.folder), adapter_name=peft_names[-1])
        model.set_adapter(peft_names[0])
        model.eval()
        match_model_dtype(model)  # LoRA weights in the base dtype: fewer casts per step, the same answers
    entries = served_entries(main, extra, served_name, peft_names)
    served = describe_all(entries, tokenizer)
    for name, run, _ in entries:   # a vision-language model: each name's prompts with images (serve/media.py)
        served[name].media = VisionPrompts.for_model(run.cfg, model, tokenizer, served[name].template,
                                                     folder=main.folder if main.kind == "full" else None)
    context = context_length(model)
    return Loaded(model, tokenizer, served, context, describe_lines(description, context, entries, served),
                  "huggingface", main.cfg)
