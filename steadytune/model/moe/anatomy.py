"""Where the parts of a mixture-of-experts model are, through a peft wrapper: the routed experts (transformers 5
stores each layer's as fused 3-D parameters, `gate_up_proj` [experts, 2 x intermediate, hidden] and `down_proj`;
older code and remote code as a ModuleList of small MLPs), the shared experts some models add (Qwen2-MoE,
DeepSeek), and the routers that pick each token's experts; and each parameter's kind, so that the start of a run can
say what trains and what stays frozen, by kind (a MoE run that trains only attention says so at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from steadytune.hardware.moe_shape import experts_per_layer, experts_per_token
from steadytune.model.quantize import logical_numel

# The kinds of parameters a decoder holds, in the order the start-up line prints them.
ATTENTION, DENSE_MLP, SHARED_EXPERT, ROUTED_EXPERTS, ROUTER = (
    "attention", "dense MLP", "shared expert", "routed experts", "router")
EMBEDDINGS, NORMS, OTHER = "embeddings and head", "norms", "other"
KINDS = (ATTENTION, DENSE_MLP, SHARED_EXPERT, ROUTED_EXPERTS, ROUTER, EMBEDDINGS, NORMS, OTHER)

# Name segments, as transformers' model files spell them.
_ATTENTION_SEGMENTS = {"self_attn", "attn", "attention", "self_attention", "cross_attn", "linear_attn"}
_MLP_SEGMENTS = {"mlp", "feed_forward", "ffn", "block_sparse_moe", "moe"}
_SHARED_SEGMENTS = {"shared_expert", "shared_experts", "shared_mlp"}
_ROUTER_SEGMENTS = {"router", "gate", "shared_expert_gate", "gating_network"}
_EMBEDDING_SEGMENTS = {"embed_tokens", "lm_head", "score", "wte", "wpe", "embed_positions", "embeddings"}
# What peft puts into a wrapped module's path; not a part of the model.
_PEFT_SEGMENTS = {"base_model", "base_layer", "lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B",
                  "lora_magnitude_vector", "modules_to_save", "original_module", "default"}

# Keys of the fused expert weights, by transformers' use_experts_implementation (gate and up side by side, or up only).
FUSED_UP_NAMES = ("gate_up_proj", "up_proj")
FUSED_DOWN_NAME = "down_proj"


def parameter_kind(name: str) -> str:
    """The kind of a parameter (or module) from its qualified name, peft's wrappers looked through."""
    segments = [s for s in name.split(".") if s not in _PEFT_SEGMENTS]
    leaf = segments[-1] if segments else ""
    module_segments = segments[:-1] if leaf in ("weight", "bias") or leaf.endswith("_proj") or leaf.endswith(
        "_bias") else segments
    if any(s in _ROUTER_SEGMENTS for s in module_segments):
        return ROUTER
    if any(s in _SHARED_SEGMENTS for s in module_segments):
        return SHARED_EXPERT
    if "experts" in segments:
        return ROUTED_EXPERTS
    if any(s in _ATTENTION_SEGMENTS for s in segments):
        return ATTENTION
    if any(s in _MLP_SEGMENTS for s in segments):
        return DENSE_MLP
    if any(s in _EMBEDDING_SEGMENTS for s in segments):
        return EMBEDDINGS
    if any("norm" in s for s in segments):
        return NORMS
    return OTHER


def is_fused_experts(module: nn.Module) -> bool:
    """A transformers 5 experts module: every expert's weights in one 3-D parameter per projection."""
    if not hasattr(module, "num_experts"):
        return False
    up = next((getattr(module, n, None) for n in FUSED_UP_NAMES if isinstance(getattr(module, n, None), nn.Parameter)),
              None)
    down = getattr(module, FUSED_DOWN_NAME, None)
    return up is not None and isinstance(down, nn.Parameter) and len(full_shape(up)) == 3 and len(full_shape(down)) == 3


def full_shape(param: torch.Tensor) -> tuple[int, ...]:
    """A parameter's shape, also where DeepSpeed ZeRO-3 has partitioned it (its data is then empty: ds_shape)."""
    return tuple(getattr(param, "ds_shape", param.shape))


def moe_block_classes(model: nn.Module) -> list[type]:
    """The classes of the modules that hold each layer's experts (and its router): what DeepSpeed ZeRO-3 must gather
    as one leaf, since the grouped forward reads the experts' weights without calling their module."""
    classes = []
    for site in expert_sites(model):
        parent = site.name.rsplit(".", 1)[0] if "." in site.name else ""
        block = type(model.get_submodule(parent))
        if block not in classes:
            classes.append(block)
    return classes


def innermost(module: nn.Module) -> nn.Module:
    """The module under peft's wrappers (each ParamWrapper of an experts module wraps the next)."""
    while hasattr(module, "base_layer") and isinstance(getattr(module, "base_layer"), nn.Module):
        module = module.base_layer
    return module


@dataclass(frozen=True)
class ExpertSite:
    """One MoE layer's routed experts: `name` is the path of the module the layer calls (peft's outermost wrapper,
    once LoRA is attached), `experts` the transformers module under it."""
    name: str
    module: nn.Module
    experts: nn.Module


def expert_sites(model: nn.Module) -> list[ExpertSite]:
    """Every layer's fused routed experts, outermost wrapper first; a wrapper's inner modules are not listed again."""
    sites, inside = [], set()
    for name, module in model.named_modules():
        if id(module) in inside:
            continue
        experts = innermost(module)
        if is_fused_experts(experts):
            sites.append(ExpertSite(name, module, experts))
            inner = module
            while inner is not experts:
                inside.add(id(inner))
                inner = inner.base_layer
            inside.add(id(experts))
    return sites


def fused_up_name(experts: nn.Module) -> str:
    return next(n for n in FUSED_UP_NAMES if isinstance(getattr(experts, n, None), nn.Parameter))


def expert_list_names(model: nn.Module) -> list[str]:
    """Older MoE code (transformers 4, remote code): the routed experts as a ModuleList of MLPs (`experts.0.w1`)."""
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "experts"]


def router_module_names(model: nn.Module) -> list[str]:
    """The routers: transformers 5's TopKRouter modules, and in older code the linear `gate` beside a layer's experts
    (Mixtral's block_sparse_moe.gate); also Qwen2-MoE's `shared_expert_gate`, the sigmoid gate of its shared expert."""
    names = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if "lora_" in name or "modules_to_save" in name or leaf == "base_layer":
            continue
        if type(module).__name__.lower().endswith("router") and hasattr(module, "weight"):
            names.append(name)
        elif isinstance(module, nn.Linear) and leaf in _ROUTER_SEGMENTS and parameter_kind(name + ".weight") == ROUTER:
            names.append(name)
    return names


def is_moe(model: nn.Module) -> bool:
    return bool(expert_sites(model) or expert_list_names(model))


def _text_config(model: nn.Module):
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return config


@dataclass
class KindCount:
    trainable: int = 0
    total: int = 0


def count_by_kind(model: nn.Module) -> dict[str, KindCount]:
    """Parameters by kind (tied weights once; ZeRO-3 shards and 4-bit weights counted in full)."""
    counts = {kind: KindCount() for kind in KINDS}
    for name, param in model.named_parameters():
        n = getattr(param, "ds_numel", None) or logical_numel(param)
        count = counts[parameter_kind(name)]
        count.total += n
        if param.requires_grad:
            count.trainable += n
    return counts


def describe_trainable(model: nn.Module) -> str | None:
    """One line of trainable parameters by kind for a MoE model, naming what stays frozen; None for a dense model.
    A routed-experts count of 0 is said in words: the silent failure this line exists to show."""
    if not is_moe(model):
        return None
    counts = count_by_kind(model)
    config = _text_config(model)
    experts = experts_per_layer(config) if config is not None else None
    layers = len(expert_sites(model)) or len(expert_list_names(model))
    parts = []
    for kind in KINDS:
        c = counts[kind]
        if c.total == 0 or kind in (NORMS, OTHER, EMBEDDINGS) and c.trainable == 0:
            continue
        shown = f"{kind} {c.trainable:,}" if c.trainable else f"{kind} 0 (frozen)"
        if kind == ROUTED_EXPERTS and experts:
            shown += f" ({experts} experts x {layers} layers)"
        parts.append(shown)
    return "; ".join(parts)


def routed_experts_trainable(model: nn.Module) -> bool:
    return count_by_kind(model)[ROUTED_EXPERTS].trainable > 0


def active_parameters(model: nn.Module) -> tuple[int, int]:
    """-> (parameters a token passes through, all parameters): a routed expert counts for top_k of every num_experts
    (what MFU of a MoE model counts: the FLOPs actually spent per token)."""
    config = _text_config(model)
    total = sum(getattr(p, "ds_numel", None) or logical_numel(p) for p in model.parameters())
    experts, top_k = (experts_per_layer(config), experts_per_token(config)) if config is not None else (None, None)
    if not experts or not top_k:
        return total, total
    routed = sum(getattr(p, "ds_numel", None) or logical_numel(p) for name, p in model.named_parameters()
                 if parameter_kind(name) == ROUTED_EXPERTS and "lora_" not in name)
    return total - routed + routed * top_k // experts, total


def routed_weight_dtype(model: nn.Module) -> torch.dtype | None:
    sites = expert_sites(model)
    return getattr(sites[0].experts, FUSED_DOWN_NAME).dtype if sites else None
