"""`fsdp` / `fsdp_config` / `fsdp_version`: the FSDP keys of transformers' TrainingArguments (LLaMA-Factory passes
them through) and of Axolotl, read into one settings object, then into Accelerate's FSDP2 plugin.

Keys are accepted with or without the `fsdp_` prefix (transformers strips it; Accelerate's config files keep it).
FSDP1 runs as FSDP2: the FSDP1-only settings map onto FSDP2 where they have a meaning (sharding_strategy FULL_SHARD
-> reshard_after_forward true, SHARD_GRAD_OP -> false) and are recorded as having none otherwise.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadytune.config import load_yaml_file
from steadytune.errors import UserError

# fsdp_config keys (prefix stripped) -> what they do here.
SETTINGS = {
    "version": "FSDP version; always 2 here",
    "reshard_after_forward": "free the gathered weights after forward (ZeRO-3-like) or keep them until backward",
    "cpu_ram_efficient_loading": "only rank 0 reads the weights; the others receive their shards",
    "offload_params": "keep the shards (and optimizer state) in CPU memory",
    "state_dict_type": "how Accelerate would save; steadytune always gathers a full state (see checkpoints)",
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP (default), SIZE_BASED_WRAP or NO_WRAP",
    "transformer_layer_cls_to_wrap": "decoder layer class names to shard as units (default: the model's own)",
    "min_num_params": "SIZE_BASED_WRAP threshold",
    "activation_checkpointing": "recompute activations in backward (= gradient_checkpointing: true)",
    # FSDP1 settings: FSDP2 has no switch for them.
    "sharding_strategy": "FSDP1; mapped onto reshard_after_forward",
    "backward_prefetch": "FSDP1; FSDP2 prefetches by itself",
    "forward_prefetch": "FSDP1; FSDP2 prefetches by itself",
    "sync_module_states": "FSDP1; FSDP2 with cpu_ram_efficient_loading broadcasts from rank 0 itself",
    "use_orig_params": "FSDP1; FSDP2 always keeps the original parameters",
    "limit_all_gathers": "FSDP1; FSDP2 does this by itself",
}
FSDP1_ONLY = ("backward_prefetch", "forward_prefetch", "sync_module_states", "use_orig_params", "limit_all_gathers")
WRAP_POLICIES = {"TRANSFORMER_BASED_WRAP": "transformer_based_wrap", "SIZE_BASED_WRAP": "size_based_wrap",
                 "NO_WRAP": "no_wrap"}
OPTIONS = ("full_shard", "shard_grad_op", "offload", "auto_wrap", "no_shard", "hybrid_shard", "hybrid_shard_zero2")


@dataclass
class FsdpSettings:
    reshard_after_forward: bool = True
    cpu_ram_efficient_loading: bool = False
    offload_params: bool = False
    auto_wrap_policy: str = "transformer_based_wrap"
    transformer_layer_cls_to_wrap: list[str] = field(default_factory=list)
    min_num_params: int | None = None
    activation_checkpointing: bool = False
    notes: list[str] = field(default_factory=list)   # how keys were read, for the start-up print

    def label(self) -> str:
        parts = ["full shard" if self.reshard_after_forward else "shard grads and optimizer (weights kept after forward)"]
        if self.offload_params:
            parts.append("offload to CPU")
        if self.cpu_ram_efficient_loading:
            parts.append("rank 0 loads")
        return f"FSDP2 ({', '.join(parts)})"


def read_fsdp_keys(train) -> FsdpSettings | None:
    """The FSDP settings asked for by the train section's fsdp / fsdp_config / fsdp_version, or None when FSDP is
    not asked for (no key, `fsdp: false`, or `no_shard`). UserError names a bad key or value."""
    options = _options(train.fsdp)
    config = _config_mapping(train.fsdp_config)
    if not options and not config and train.fsdp_version is None:
        return None   # (fsdp_transformer_layer_cls_to_wrap alone asks for no FSDP, as in transformers)
    legacy = getattr(train, "fsdp_transformer_layer_cls_to_wrap", None)
    if legacy and "transformer_layer_cls_to_wrap" not in config:   # transformers' older key
        config = {**config, "transformer_layer_cls_to_wrap": legacy}
    if "no_shard" in options:
        return None
    hybrid = [o for o in options if o.startswith("hybrid_shard")]
    if hybrid:
        raise UserError(f"fsdp: {hybrid[0]} (sharding within a node, replicating across nodes) is not supported; "
                        "use full_shard or shard_grad_op")
    settings = FsdpSettings(reshard_after_forward="shard_grad_op" not in options, offload_params="offload" in options)
    for key, value in config.items():
        _apply(settings, key, value)
    version = config.get("version", train.fsdp_version)
    if version is not None and int(version) == 1:
        settings.notes.append("fsdp_version 1 runs as FSDP2 (same sharding, per-parameter shards; Accelerate's "
                              "FSDP2 path)")
    return settings


def _options(value: Any) -> list[str]:
    if value in (None, False, "", []):
        return []
    if value is True:
        return ["full_shard", "auto_wrap"]
    items = value.split() if isinstance(value, str) else [str(v) for v in value]
    for item in items:
        if item not in OPTIONS:
            close = difflib.get_close_matches(item, OPTIONS, n=1)
            raise UserError(f"fsdp: unknown option {item!r} (choose from {', '.join(OPTIONS)})"
                            + (f"; did you mean {close[0]!r}?" if close else ""))
    return items


def _config_mapping(value: Any) -> dict:
    """fsdp_config as a mapping with the fsdp_ prefix removed; a string is a JSON or YAML file."""
    if value is None:
        return {}
    if isinstance(value, str):
        path = Path(value)
        if not path.is_file():
            raise UserError(f"fsdp_config: {path}: file not found")
        try:
            value = load_yaml_file(path, unique_keys=False) if path.suffix in (".yaml", ".yml") else \
                json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError, RecursionError) as e:
            raise UserError(f"fsdp_config: {path}: cannot read ({str(e)[:200] or type(e).__name__})") from None
        if isinstance(value, dict) and isinstance(value.get("fsdp_config"), dict):
            value = value["fsdp_config"]   # an Accelerate config file: its fsdp_config block
        if not isinstance(value, dict):
            raise UserError(f"fsdp_config: {path}: expected a mapping of FSDP settings")
    out = {}
    for key, item in value.items():
        name = str(key).removeprefix("fsdp_")
        if name not in SETTINGS:
            close = difflib.get_close_matches(name, list(SETTINGS), n=1, cutoff=0.6)
            raise UserError(f"fsdp_config: unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; known: {', '.join(SETTINGS)}")
        out[name] = item
    return out


def _apply(settings: FsdpSettings, key: str, value: Any) -> None:
    if key in FSDP1_ONLY:
        settings.notes.append(f"fsdp_config.{key}: {SETTINGS[key]}")
    elif key == "sharding_strategy":
        strategy = str(value).upper()
        if strategy in ("FULL_SHARD", "1"):
            settings.reshard_after_forward = True
        elif strategy in ("SHARD_GRAD_OP", "2"):
            settings.reshard_after_forward = False
        else:
            raise UserError(f"fsdp_config.sharding_strategy: {value!r} is not supported (FULL_SHARD or SHARD_GRAD_OP)")
        settings.notes.append(f"fsdp_config.sharding_strategy {strategy} -> reshard_after_forward "
                              f"{settings.reshard_after_forward}")
    elif key in ("reshard_after_forward", "cpu_ram_efficient_loading", "offload_params", "activation_checkpointing"):
        if isinstance(value, str) and value.upper() in ("FULL_SHARD", "SHARD_GRAD_OP") and key == "reshard_after_forward":
            value = value.upper() == "FULL_SHARD"   # Accelerate's config files allow the strategy name here
        setattr(settings, key, _bool(key, value))
    elif key == "state_dict_type":
        if str(value).upper() not in ("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"):
            raise UserError(f"fsdp_config.state_dict_type: {value!r} is not FULL_STATE_DICT or SHARDED_STATE_DICT")
        if str(value).upper() != "FULL_STATE_DICT":
            settings.notes.append(f"fsdp_config.state_dict_type {value}: checkpoints and the adapter are gathered in "
                                  "full on the main process anyway, so they resume on any number of GPUs and load "
                                  "like a one-GPU run's")
    elif key == "auto_wrap_policy":
        policy = WRAP_POLICIES.get(str(value).upper())
        if policy is None:
            raise UserError(f"fsdp_config.auto_wrap_policy: {value!r} (choose from {', '.join(WRAP_POLICIES)})")
        settings.auto_wrap_policy = policy
    elif key == "transformer_layer_cls_to_wrap":
        names = value.split(",") if isinstance(value, str) else list(value or [])
        settings.transformer_layer_cls_to_wrap = [str(n).strip() for n in names if str(n).strip()]
    elif key == "min_num_params":
        settings.min_num_params = int(value)
    elif key == "version":
        if int(value) not in (1, 2):
            raise UserError(f"fsdp_config.fsdp_version: {value!r} (1 or 2)")


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise UserError(f"fsdp_config.{key}: expected true or false, got {value!r}")


def make_plugin(settings: FsdpSettings, layers: list[str], precision: str = "fp32"):
    """Accelerate's FSDP2 plugin for these settings.

    Mixed precision: weights are gathered in bf16/fp16 for compute (as autocast would use them), but gradients are
    reduced in fp32 and the module's outputs are not cast: Accelerate's default policy reduces in bf16 and casts the
    recipe's summed loss to bf16 (measured: a loss of 6.2443 reported as 6.25), where DDP keeps both in fp32."""
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin

    policy = None
    if precision in ("bf16", "fp16"):
        from torch.distributed.fsdp import MixedPrecisionPolicy
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if precision == "bf16" else torch.float16,
                                      reduce_dtype=torch.float32, output_dtype=None, cast_forward_inputs=True)
    return FullyShardedDataParallelPlugin(
        fsdp_version=2, reshard_after_forward=settings.reshard_after_forward, cpu_offload=settings.offload_params,
        cpu_ram_efficient_loading=settings.cpu_ram_efficient_loading, state_dict_type="FULL_STATE_DICT",
        auto_wrap_policy=settings.auto_wrap_policy,
        transformer_cls_names_to_wrap=settings.transformer_layer_cls_to_wrap or layers or None,
        min_num_params=settings.min_num_params, activation_checkpointing=False, mixed_precision_policy=policy)
