"""What `serve` serves: each name a client may ask for (`model` in a request), with the base weights or one adapter,
that run's chat template and, for classification runs, its label set; and the one-line description printed at start.
Both backends (transformers + peft in loading.py, vLLM in vllm_engine.py) describe what they loaded through this.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from steadytune.config import RunConfig
from steadytune.data.encode import encode_label_targets
from steadytune.data.templates import get_template
from steadytune.errors import UserError

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
    media: Any = None                      # a vision-language model's prompts with images (infer/media.VisionPrompts)


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
class ServedRun:
    """A resolved SOURCE or --adapter path: its config, the trained folder and what it holds."""
    cfg: RunConfig
    folder: Optional[Path]
    kind: str                              # "lora" | "full" | "base" (nothing trained: the base model alone)
    name: Optional[str] = None             # what it is served as by default (an archive: its own name, not the cache's)


def served_entries(main: ServedRun, extra: list[tuple[str, ServedRun]], served_name: Optional[str],
                   adapter_names: list[str]) -> list[tuple[str, ServedRun, Optional[str]]]:
    """(served name, run, engine adapter name or None) for SOURCE, the base model under a LoRA SOURCE, and each
    --adapter; `adapter_names` are the engine's names of SOURCE's adapter (if LoRA) and then the --adapter ones."""
    names = iter(adapter_names)
    main_name = served_name or main.name or (main.folder.resolve().name if main.folder else base_name(main.cfg))
    if main.kind == "lora":
        entries = [(main_name, main, next(names)), (base_name(main.cfg), ServedRun(main.cfg, None, "base"), None)]
    else:
        entries = [(main_name, main, None)]
    return entries + [(name, run, next(names)) for name, run in extra]


def describe_all(entries: list[tuple[str, ServedRun, Optional[str]]], tokenizer: Any) -> dict:
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
