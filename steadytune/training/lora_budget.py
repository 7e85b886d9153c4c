"""Whether the LoRA adapters a config asks for can exist here, said before they are made.

A rank is a number anyone can type: `lora_rank=1000000` asks for r x (in + out) parameters per adapted layer, which
on a tiny model is already 128 GB of fp32 and ended in the allocator's traceback. Each trainable parameter costs
about 16 bytes while training (fp32 weight, its gradient, AdamW's two moments); what the adapters would take is
compared with the memory free where they are made, and a config past it is one line naming lora_rank.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from steadytune.errors import UserError
from steadytune.model.lora import resolve_lora_targets
from steadytune.model.moe.anatomy import expert_sites, full_shape
from steadytune.model.moe.targets import expert_parameter_targets

BYTES_PER_TRAINABLE = 16   # fp32 weight + gradient + AdamW exp_avg + exp_avg_sq


def adapter_parameters(model: nn.Module, lora_target: str, rank: int, method=None) -> int:
    """LoRA parameters of `rank` over the layers lora_target names: r x (in + out) for each adapted linear, and
    r x (in + out) for each expert of each adapted fused expert weight of a mixture of experts. `method`: the
    config's method section (a vision-language model's freeze_* keys decide which parts' layers count)."""
    targets = resolve_lora_targets(model, lora_target, method)
    total = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets):
            total += rank * (module.in_features + module.out_features)
    requested = None if lora_target.strip() == "all" else [t.strip() for t in lora_target.split(",") if t.strip()]
    expert_targets, _, _ = expert_parameter_targets(model, requested, set(targets))
    for site in expert_sites(model):
        for target in expert_targets:
            experts, rows, columns = full_shape(getattr(site.experts, target.rsplit(".", 1)[-1]))
            total += rank * experts * (rows + columns)
    return total


def free_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on `device`: the GPU's free memory, or the host's available RAM (Linux)."""
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0]
        except (RuntimeError, AssertionError):
            return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_adapter_fits(model: nn.Module, method) -> None:
    """UserError naming lora_rank when the adapters (`method`: the config's method section) would not fit in the
    memory free where the model lies."""
    count = adapter_parameters(model, method.lora_target, method.lora_rank, method)
    need = count * BYTES_PER_TRAINABLE
    device = next(model.parameters()).device
    free = free_bytes(device)
    if free is None or need <= free:
        return
    per_rank = max(1, count // method.lora_rank)
    fits = max(1, free // (per_rank * BYTES_PER_TRAINABLE))
    raise UserError(f"lora_rank {method.lora_rank}: the adapters would hold {count:,} parameters, about "
                    f"{need / 2**30:,.1f} GiB while training (weights, gradients and AdamW's state), and "
                    f"{free / 2**30:,.1f} GiB is free on {device}; at most about lora_rank {fits:,} fits here "
                    "(8 to 64 is usual)")
