"""Which expert weights LoRA adapts, and how peft is told.

transformers 5 keeps each MoE layer's routed experts as two fused 3-D parameters (`gate_up_proj`, `down_proj`), not
as linear layers. A LoRA config that names linear layers (`all-linear`, LLaMA-Factory's `lora_target: all`, which
picks modules whose class name holds "Linear") therefore adapts attention and the shared expert and leaves every
routed expert frozen, without a word (the bug several peers shipped: unslothai/unsloth#6936, ByteDance-Seed/VeOmni#866).
PEFT reaches the fused experts through `target_parameters`: one LoRA pair per expert, stored side by side as
lora_A [experts x r, in] and lora_B [out, r x experts], the adapter files any PEFT loads. Here `all` includes them,
and a list may name them (`experts`, `gate_up_proj`, `down_proj`, or the per-expert names of older checkpoints:
gate_proj/up_proj/w1/w3 -> gate_up_proj, w2 -> down_proj).

The routers stay frozen (as Unsloth's and LLaMA-Factory's defaults: a router trained with a small LoRA dataset tends
to collapse onto a few experts); `train_router: true` trains them in full, saved with the adapter.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from steadytune.config import ConfigError, show_value
from steadytune.model.moe.anatomy import (
    FUSED_DOWN_NAME,
    expert_sites,
    fused_up_name,
    router_module_names,
)

# Per-expert projection names of transformers 4 and remote-code checkpoints (Qwen-MoE's gate_proj/up_proj/down_proj,
# Mixtral's w1/w3/w2), which a LLaMA-Factory file written for them may list: the fused weight that holds them now.
_PER_EXPERT_NAMES = {"gate_proj": "up", "up_proj": "up", "w1": "up", "w3": "up", "down_proj": "down", "w2": "down"}
_EXPERT_GROUP_NAMES = ("experts", "routed_experts")


@dataclass
class ExpertTargets:
    """What peft's LoraConfig gets for the routed experts: `parameters` (target_parameters, matched as suffixes of
    the parameters' qualified names), the router modules to train in full (modules_to_save), and what was mapped."""
    parameters: list[str] = field(default_factory=list)
    routers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _fused_names(model: nn.Module) -> dict[str, str]:
    """{"up": "gate_up_proj" or "up_proj", "down": "down_proj"} for the model's fused experts; {} for none."""
    sites = expert_sites(model)
    return {"up": fused_up_name(sites[0].experts), "down": FUSED_DOWN_NAME} if sites else {}


def expert_parameter_targets(model: nn.Module, requested: list[str] | None, linear_leaves: set[str]
                             ) -> tuple[list[str], list[str], list[str]]:
    """-> (target_parameters, the requested names they used, notes). `requested` None means `all`. A requested name
    that is a linear layer somewhere (a shared expert's down_proj) stays a linear target too."""
    fused = _fused_names(model)
    if not fused:
        return [], [], []
    up, down = f"experts.{fused['up']}", f"experts.{fused['down']}"
    if requested is None:
        return [up, down], [], []
    chosen, used, notes = [], [], []
    for name in requested:
        if name in _EXPERT_GROUP_NAMES:
            chosen += [up, down]
        elif name in (fused["up"], fused["down"]) or name in (up, down):
            chosen.append(up if name.endswith(fused["up"]) else down)
        elif name in _PER_EXPERT_NAMES:
            side = _PER_EXPERT_NAMES[name]
            chosen.append(up if side == "up" else down)
            if side == "up" and name not in linear_leaves:
                notes.append(f"{name}: the routed experts' {name} lives in the fused {fused['up']} (gate and up side "
                             "by side): both are adapted together")
        else:
            continue
        used.append(name)
    return list(dict.fromkeys(chosen)), used, notes


def router_targets(model: nn.Module, requested: list[str] | None, train_router: bool) -> list[str]:
    """The router modules trained in full (train_router: true), as module-name suffixes for peft's modules_to_save;
    a lora_target that names a router is refused (a router is a few thousand weights per layer: LoRA on it saves
    nothing, and its frozen default is deliberate)."""
    names = router_module_names(model)
    leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
    for name in requested or []:
        refuse_router_name(model, name)
    return leaves if train_router and names else []


def refuse_router_name(model: nn.Module, name: str) -> None:
    """A lora_target entry that names a router: refused, pointing at train_router."""
    if name in {n.rsplit(".", 1)[-1] for n in router_module_names(model)}:
        raise ConfigError(f"lora_target: {show_value(name)} is a router (it picks each token's experts); routers "
                          "stay frozen by default: train_router: true trains them in full")


def linear_leaves_without_routers(model: nn.Module, leaves: list[str]) -> list[str]:
    """`all`'s linear leaves minus routers that are linear layers (Mixtral's gate in older code, Qwen2-MoE's
    shared_expert_gate): frozen by default, as the fused routers are."""
    routers = {n.rsplit(".", 1)[-1] for n in router_module_names(model)}
    return [leaf for leaf in leaves if leaf not in routers]


def plan_expert_targets(model: nn.Module, requested: list[str] | None, linear_leaves: set[str],
                        train_router: bool) -> ExpertTargets:
    """Everything of a MoE model that LoRA's config must name beyond its linear layers."""
    parameters, _, notes = expert_parameter_targets(model, requested, linear_leaves)
    return ExpertTargets(parameters=parameters, routers=router_targets(model, requested, train_router), notes=notes)


def is_expert_name(model: nn.Module, name: str) -> bool:
    """A lora_target entry that names the fused routed experts (and so is no linear layer's name)."""
    return bool(expert_parameter_targets(model, [name], set())[0])


# peft's rewriting of transformers 4 LoRA configs and adapter files for the MoE layouts transformers 5 fused
# (peft/utils/transformers_weight_conversion.py, called by get_peft_model and load_adapter).
_PEFT_CONVERSIONS = ("convert_peft_config_for_transformers", "convert_peft_adapter_state_dict_for_transformers")


@contextlib.contextmanager
def targets_as_written(active: bool = True):
    """Keep peft from rewriting a LoRA config written for transformers 5's layout (inside this block).

    For model types whose experts transformers 5 fused (qwen3_moe, deepseek_v2/v3, glm4_moe, olmoe, mixtral ...)
    peft reads gate_proj / up_proj / down_proj / w1 / w2 / w3 in target_modules as the old per-expert linears and
    moves them to target_parameters: right for an adapter trained under transformers 4, wrong for a config that names
    the v5 layout, where those names are the dense MLP and the shared experts of the same model (DeepSeek-V2's first
    layer and shared experts would silently stay frozen, and an adapter saved with them would no longer load). Our
    configs are resolved against the model as it is (targets above), and adapters we write carry target_parameters."""
    if not active:
        yield
        return
    try:
        import peft.utils.transformers_weight_conversion as conversion  # lazy: peft is imported where adapters are
    except ImportError:   # a peft without the conversion (before 0.18) rewrites nothing
        yield
        return
    saved = {name: getattr(conversion, name) for name in _PEFT_CONVERSIONS if hasattr(conversion, name)}
    conversion.convert_peft_config_for_transformers = lambda *args, **kwargs: None
    conversion.convert_peft_adapter_state_dict_for_transformers = (
        lambda model=None, peft_config=None, adapter_state_dict=None, adapter_name="default": adapter_state_dict)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(conversion, name, value)


def written_for_fused_experts(adapter_dir: Path) -> bool:
    """An adapter whose config names target_parameters was written for transformers 5's fused experts: peft's
    transformers 4 conversion must not touch it."""
    try:
        config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("target_parameters"))
