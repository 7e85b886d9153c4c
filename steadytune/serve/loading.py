"""What `serve` serves: SOURCE (a run's YAML, a run folder or an adapter archive) and the `--adapter name=path` list,
resolved once at start into one base model with its adapters and, per served name, the chat template and label set to use.

All model loading of the server goes through `load_served`; nothing a request carries reaches this module (a
request's `model` only picks among the names fixed here).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from steadytune.config import RunConfig, load_config
from steadytune.errors import UserError

RUN_CONFIG = "run_config.yaml"  # written by `train` into its output_dir
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")


@dataclass
class ServedModel:
    """One name clients can ask for: the base weights or one adapter, with that run's prompt format."""
    name: str
    adapter: Optional[str]                 # peft adapter name; None = the base weights
    template: Any                          # steadytune.data.templates.Template
    default_max_tokens: int                # max_new_tokens of the run's config
    label_names: Optional[list] = None     # classification runs: /v1/classify answers with these
    prompt_template: Optional[str] = None
    label_targets: Optional[list] = None   # token ids of each label (label word + end token)
    max_prompt_len: Optional[int] = None   # classify: prompts are cut to this, as `eval` does


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    served: dict                           # name -> ServedModel
    context_length: int
    description: str
    backend: str = "huggingface"
    cfg: Optional[RunConfig] = None
    lora_requests: dict = dataclasses.field(default_factory=dict)  # vLLM: adapter name -> LoRARequest


@dataclass
class _Run:
    """A resolved SOURCE or --adapter path: its config, the trained folder and what it holds."""
    cfg: RunConfig
    folder: Optional[Path]
    kind: str                              # "lora" | "full" | "base" (nothing trained: the base model alone)
    name: Optional[str] = None             # what it is served as by default (an archive: its own name, not the cache's)


def load_served(source: str, adapters: list[str], overrides: list[str], served_name: Optional[str] = None) -> Loaded:
    """Load SOURCE's model (and adapter), every `name=path` adapter on the same base, and describe each name."""
    main = resolve_source(source, overrides)
    extra = [_parse_adapter_arg(a) for a in adapters]
    if extra and main.kind == "full":
        raise UserError(f"--adapter needs a LoRA run or a base model as SOURCE; {source} is a full fine-tune, and "
                        "adapters trained on the base model do not fit its changed weights")
    extra_runs = [(name, _resolve_adapter(name, path, main.cfg)) for name, path in extra]
    if main.cfg.infer.infer_backend == "vllm":
        from steadytune.serve.vllm_engine import load_vllm
        return load_vllm(main, extra_runs, served_name)
    return _load_huggingface(main, extra_runs, served_name)


# ---------------------------------------------------------------------------------------------------------
# Resolving paths
# ---------------------------------------------------------------------------------------------------------

def resolve_source(source: str, overrides: list[str]) -> _Run:
    """SOURCE as chat/predict/export read it (a config, a run folder, or an adapter archive: verified, unpacked)."""
    from steadytune.model.archive import archive_stem, is_archive
    from steadytune.infer.loading import BASE, LORA, open_run

    run = open_run(source, overrides)
    if run.kind == BASE:
        print(f"serve: {source} names no trained adapter or model; serving the base model "
              f"{run.cfg.model.model_name_or_path} alone")
    name = None
    if is_archive(Path(source)):  # unpacked into a cache folder named by its digest: serve it by the archive's name
        name = archive_stem(Path(source))
    return _Run(run.cfg, run.folder, {LORA: "lora", BASE: "base"}.get(run.kind, "full"), name)


def _parse_adapter_arg(arg: str) -> tuple[str, str]:
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise UserError(f"--adapter {arg!r}: expected name=path, e.g. --adapter sentiment=saves/sentiment")
    return name, path


def _resolve_adapter(name: str, path: str, main_cfg: RunConfig) -> _Run:
    """An --adapter path: a run folder (its own template and labels) or a bare adapter folder (SOURCE's)."""
    from steadytune.model.archive import unpacked

    folder = unpacked(Path(path).expanduser())  # an archive: verified against its manifest, then unpacked
    if not (folder / "adapter_config.json").is_file():
        raise UserError(f"--adapter {name}={path}: no adapter_config.json there (not a LoRA adapter folder)")
    if (folder / RUN_CONFIG).is_file():
        cfg = load_config(folder / RUN_CONFIG)
        if cfg.model.model_name_or_path != main_cfg.model.model_name_or_path:
            raise UserError(f"--adapter {name}={path}: trained on {cfg.model.model_name_or_path}, but the server's base "
                            f"model is {main_cfg.model.model_name_or_path}")
    else:
        cfg = dataclasses.replace(main_cfg)
    return _Run(cfg, folder, "lora")


# ---------------------------------------------------------------------------------------------------------
# Loading: transformers + peft
# ---------------------------------------------------------------------------------------------------------

def _load_huggingface(main: _Run, extra: list[tuple[str, _Run]], served_name: Optional[str]) -> Loaded:
    from steadytune.infer.loading import load_for_inference
    from steadytune.model.saved_weights import check_checkpoint_matches
    from steadytune.model.lora import load_trained_adapter

    cfg = main.cfg
    if main.kind == "full":  # the trained folder is itself the model
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, model_name_or_path=str(main.folder)))
    model, tokenizer, _, description = load_for_inference(cfg)

    adapter_runs = ([main] if main.kind == "lora" else []) + [run for _, run in extra]
    peft_names: list[str] = []
    if adapter_runs:
        for run in adapter_runs[1:]:  # refused before any weight is loaded
            check_checkpoint_matches(run.folder, model)
        model = load_trained_adapter(model, adapter_runs[0].folder, allow_pickle=cfg.model.allow_pickle_weights)
        peft_names.append(model.active_adapter)
        for i, run in enumerate(adapter_runs[1:], start=1):
            peft_names.append(f"adapter{i}")
            model.load_adapter(str(run.folder), adapter_name=peft_names[-1])
        model.set_adapter(peft_names[0])
        model.eval()
        from steadytune.serve.adapters import match_model_dtype
        match_model_dtype(model)  # LoRA weights in the base dtype: fewer casts per step, the same answers
    entries = served_entries(main, extra, served_name, peft_names)
    served = describe_all(entries, tokenizer)
    context = context_length(model)
    return Loaded(model, tokenizer, served, context, describe_lines(description, context, entries, served),
                  "huggingface", main.cfg)


def served_entries(main: _Run, extra: list[tuple[str, _Run]], served_name: Optional[str],
                   adapter_names: list[str]) -> list[tuple[str, _Run, Optional[str]]]:
    """(served name, run, engine adapter name or None) for SOURCE, the base model under a LoRA SOURCE, and each
    --adapter; `adapter_names` are the engine's names of SOURCE's adapter (if LoRA) and then the --adapter ones."""
    names = iter(adapter_names)
    main_name = served_name or main.name or (main.folder.resolve().name if main.folder else base_name(main.cfg))
    if main.kind == "lora":
        entries = [(main_name, main, next(names)), (base_name(main.cfg), _Run(main.cfg, None, "base"), None)]
    else:
        entries = [(main_name, main, None)]
    return entries + [(name, run, next(names)) for name, run in extra]


def describe_all(entries: list[tuple[str, _Run, Optional[str]]], tokenizer: Any) -> dict:
    served: dict[str, ServedModel] = {}
    for name, run, adapter in entries:
        if not NAME_PATTERN.match(name):
            raise UserError(f"served model name {name!r}: use letters, digits and . _ : / - (at most 128 characters)")
        if name in served:
            raise UserError(f"served model name {name!r} is used twice; name adapters apart (--adapter NAME=path, "
                            "--served-model-name)")
        served[name] = describe_served(name, adapter, run.cfg, tokenizer)
    return served


def describe_lines(description: str, context: int, entries: list, served: dict) -> str:
    lines = [f"serve: {description}; context {context} tokens"]
    lines += [f"  model {name!r}: " + (f"adapter {run.folder}" if adapter else "base weights")
              + f", template {run.cfg.data.template}"
              + (f", classify {served[name].label_names}" if served[name].label_names else "")
              for name, run, adapter in entries]
    return "\n".join(lines)


def describe_served(name: str, adapter: Optional[str], cfg: RunConfig, tokenizer: Any) -> ServedModel:
    from steadytune.data.encode import encode_label_targets
    from steadytune.data.templates import get_template

    template = get_template(cfg.data.template, tokenizer)
    entry = ServedModel(name, adapter, template, cfg.train.max_new_tokens)
    if cfg.data.label_names and cfg.data.prompt_template:
        entry.label_names = list(cfg.data.label_names)
        entry.prompt_template = cfg.data.prompt_template
        entry.label_targets = encode_label_targets(template, tokenizer, entry.label_names)
        entry.max_prompt_len = cfg.data.cutoff_len - max(map(len, entry.label_targets))
    return entry


def base_name(cfg: RunConfig) -> str:
    """The name the base model is served under: a local path's last part (paths stay private), else the alias or
    hub id as written."""
    name = str(cfg.model.model_name_or_path)
    path = Path(name).expanduser()
    if path.exists():
        return path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
    return name


def context_length(model: Any) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(getattr(config, "max_position_embeddings", None) or 2048)
