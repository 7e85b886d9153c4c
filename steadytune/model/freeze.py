"""Freeze tuning and LLaMA Pro: which whole weights train, computed as LLaMA-Factory computes them.

LLaMA-Factory's `finetuning_type: freeze` (model/adapter.py, _setup_freeze_tuning, 0.9.5) trains some decoder layers
in full and freezes the rest: the last `freeze_trainable_layers` layers (the first -n when negative), or with
`use_llama_pro` the blocks a block expansion inserted (every num_layers/n-th layer, the last of each group), and
within those layers the `freeze_trainable_modules` (names inside a layer: self_attn, mlp, ...; all: every one), plus
`freeze_extra_modules` outside the layers (embed_tokens, norm, ...). The trainable set is chosen by substring
match on parameter names, as there (".3.mlp" in "model.layers.3.mlp.up_proj.weight"; an extra module "norm" also
matches every layer's norms, as in LLaMA-Factory): the same names train, so a LLaMA-Factory freeze config trains the
same weights here. With LoRA, `use_llama_pro` puts the adapters on the expanded blocks only (find_expanded_modules
there).
"""

from __future__ import annotations

import re

from torch import nn

from steadytune.config import ConfigError


def split_names(value: str | None) -> list[str]:
    """LLaMA-Factory's split_arg: a comma list -> its stripped items."""
    return [item.strip() for item in value.split(",")] if value else []


def layer_count(model: nn.Module) -> int:
    config = model.config
    config = getattr(config, "text_config", None) or config
    layers = (getattr(config, "num_hidden_layers", None) or getattr(config, "num_layers", None)
              or getattr(config, "n_layer", None))
    if not layers:
        raise ConfigError("finetuning_type: freeze: this model's config names no number of layers "
                          "(num_hidden_layers); use lora or full")
    return int(layers)


def trainable_layer_ids(num_layers: int, trainable_layers: int, llama_pro: bool) -> list[int]:
    """The decoder layers that train: the expanded blocks (LLaMA Pro), the last n, or the first -n."""
    if llama_pro:
        if trainable_layers <= 0 or num_layers % trainable_layers:
            raise ConfigError(f"use_llama_pro: the model's {num_layers} layers are not a multiple of "
                              f"freeze_trainable_layers {trainable_layers} (the number of expanded blocks)")
        stride = num_layers // trainable_layers
        return list(range(stride - 1, num_layers + stride - 1, stride))
    if trainable_layers > 0:
        return list(range(max(0, num_layers - trainable_layers), num_layers))
    return list(range(min(-trainable_layers, num_layers)))


def freeze_patterns(model: nn.Module, trainable_layers: int, trainable_modules: str, extra_modules: str | None,
                    llama_pro: bool) -> list[str]:
    """The name parts whose parameters train (LLaMA-Factory's `trainable_layers` list); a module name the model
    does not have is an error listing the ones it has."""
    ids = trainable_layer_ids(layer_count(model), trainable_layers, llama_pro)
    hidden, outside = set(), set()
    for name, _ in model.named_parameters():
        if ".0." in name:
            hidden.add(name.split(".0.")[-1].split(".")[0])
        elif ".1." in name:
            hidden.add(name.split(".1.")[-1].split(".")[0])
        if re.search(r"\.\d+\.", name) is None:
            outside.add(name.split(".")[-2])
    patterns = []
    for module in split_names(trainable_modules):
        if module != "all" and module not in hidden:
            raise ConfigError(f"freeze_trainable_modules: no module {module!r} in this model's layers (choose from "
                              f"{', '.join(sorted(hidden))}, or all)")
        patterns += [f".{i}.{module if module != 'all' else ''}" for i in ids]
    for module in split_names(extra_modules):
        if module not in outside:
            raise ConfigError(f"freeze_extra_modules: no module {module!r} outside the layers (choose from "
                              f"{', '.join(sorted(outside))})")
        patterns.append(module)
    return patterns


def apply_freeze(model: nn.Module, trainable_layers: int, trainable_modules: str, extra_modules: str | None,
                 llama_pro: bool) -> tuple[list[str], list[int]]:
    """Freeze every parameter but those LLaMA-Factory's freeze tuning trains; -> (the name parts, the layer ids)."""
    patterns = freeze_patterns(model, trainable_layers, trainable_modules, extra_modules, llama_pro)
    for name, param in model.named_parameters():
        param.requires_grad_(any(p in name for p in patterns))
    return patterns, trainable_layer_ids(layer_count(model), trainable_layers, llama_pro)


def expanded_block_targets(model: nn.Module, targets: list[str], trainable_layers: int) -> list[str]:
    """LLaMA Pro with LoRA: the full names of the target modules inside the expanded blocks (LLaMA-Factory's
    find_expanded_modules)."""
    ids = trainable_layer_ids(layer_count(model), trainable_layers, llama_pro=True)
    layers = [f".{i}." for i in ids]
    return [name for name, _ in model.named_modules()
            if any(t in name for t in targets) and any(layer in name for layer in layers)]
