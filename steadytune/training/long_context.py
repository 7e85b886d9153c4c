"""The long-context part of a run's speed plan: whether its decoder layers run tiled (model/tiling.py), how many
layer inputs wait in host memory (model/offload.py), and the memory plan behind both (hardware/long_context.py),
each recorded with its reason and printed at start."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from steadytune.config import RunConfig
from steadytune.errors import UserError
from steadytune.hardware.attention_kernels import tile_kernel_status
from steadytune.hardware.long_context import (
    Estimate,
    checkpointed_estimate,
    describe_levers,
    fewest_host_layers,
    room_gib,
    tiled_estimate,
)
from steadytune.hardware.layer_shapes import largest_head_dim
from steadytune.hardware.memory import held_gib
from steadytune.hardware.moe_shape import moe_shape
from steadytune.hardware.unified_memory import system_memory_gib
from steadytune.model.anatomy import text_config
from steadytune.model.config_values import model_window
from steadytune.model.offload import offload_activations, offloading_blocker
from steadytune.model.tiling import attach_tiling, tiling_blocker

# Below this many tokens a micro-batch never needs the long-context plan printed (a cutoff_len users raise on
# purpose is above it).
PLAN_SHOWN_FROM_TOKENS = 32768


@dataclass
class LongContext:
    """What the plan chose: tiled layers, host layers (and their bytes a micro-batch), the estimate."""
    tiling: bool
    host_layers: int = 0
    host_bytes: int = 0
    estimate: Estimate | None = None


def sharding_blocker(cfg: RunConfig, fsdp: bool) -> str | None:
    if cfg.train.cp_size > 1:
        return "tiled layers are not combined with sequence parallelism (cp_size) yet"
    if cfg.method.deepspeed:
        return "DeepSpeed partitions and gathers weights in hooks that the tiles' nested backward has not been tried with"
    if fsdp:
        return "FSDP's hooks around each layer have not been tried with the tiles' nested backward"
    return None


def kernel_blocker(model) -> str | None:
    """On a GPU the tiles' attention needs a flash kernel that takes a slice of queries against the keys before it
    (hardware/attention_kernels.tile_kernel_status); the reference would build [tile, tokens] score matrices."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    name, why = tile_kernel_status(str(device))
    return None if name is not None else f"no flash tile-attention kernel passed its check here ({why})"


def check_tiling_before_loading(cfg: RunConfig, skeleton, fsdp: bool) -> None:
    """sequence_tiling: true on a model (its meta-device skeleton; None: not known here) or with keys it cannot be
    tiled under: one line before any weights load (decide_tiling says the same on the loaded model)."""
    if not cfg.train.sequence_tiling:
        return
    blocker = ((tiling_blocker(skeleton, cfg.method.lora_dropout) if skeleton is not None else None)
               or sharding_blocker(cfg, fsdp))
    if blocker:
        raise UserError(f"sequence_tiling: true, but {blocker}; set sequence_tiling: false")


def check_offloading_before_loading(cfg: RunConfig, backend: str, fsdp: bool) -> None:
    """activation_offloading: true where it cannot run whatever the model (a CPU or MPS run, DeepSpeed, FSDP): one
    line before any weights load (the speed plan says the same on the loaded model, and about checkpointing)."""
    if not cfg.train.activation_offloading:
        return
    device = torch.device("cuda" if backend in ("cuda", "rocm") else backend)   # ROCm's torch device is cuda too
    sharded = "DeepSpeed" if cfg.method.deepspeed else ("FSDP" if fsdp else None)
    blocker = offloading_blocker(device, checkpointing=True, sharded=sharded)
    if blocker:
        raise UserError(f"activation_offloading: true, but {blocker}; set activation_offloading: false")


def decide_tiling(cfg: RunConfig, model, tokens: int, budget_gib: float | None, state_gib: float,
                  fsdp: bool) -> tuple[bool, str]:
    """sequence_tiling as asked, or by default where gradient checkpointing alone would not fit a micro-batch of
    `tokens` beside the weights (`state_gib`) in the GPU's memory; -> (on, reason)."""
    t = cfg.train
    blocker = tiling_blocker(model, cfg.method.lora_dropout) or sharding_blocker(cfg, fsdp) or kernel_blocker(model)
    if t.sequence_tiling is False:
        return False, "sequence_tiling: false"
    if blocker:
        if t.sequence_tiling:
            raise UserError(f"sequence_tiling: true, but {blocker}; set sequence_tiling: false")
        return False, f"off: {blocker}"
    if t.sequence_tiling:
        return True, "sequence_tiling: true was asked for"
    if budget_gib is None:
        return False, "off: no GPU memory budget known (sequence_tiling: true turns it on)"
    if tokens < t.sequence_tile_tokens:
        return False, f"off: micro-batches of {tokens:,} tokens are shorter than a tile ({t.sequence_tile_tokens:,})"
    plain = checkpointed_estimate(text_config(model), tokens, state_gib)
    if plain.gpu_gib <= room_gib(budget_gib):
        return False, (f"off: with gradient checkpointing a {tokens:,}-token micro-batch needs {plain.describe()}, "
                       f"which fits the {budget_gib:.0f} GiB GPU")
    return True, (f"on: with gradient checkpointing alone a {tokens:,}-token micro-batch would need "
                  f"{plain.describe()}, more than the {budget_gib:.0f} GiB GPU holds")


def check_window(cfg: RunConfig, config, longest: int) -> None:
    """Examples longer than the model's window (max_position_embeddings, times the RoPE scaling factor its own config
    sets, which transformers applies) train at positions it never saw: said at start, recorded, never silent."""
    window = model_window(config)
    if window and longest > window:
        scaled = window != config.max_position_embeddings
        how = (f"max_position_embeddings {config.max_position_embeddings:,} x the RoPE scaling factor of its "
               "config.json" if scaled else "max_position_embeddings; the rope_scaling key is not supported")
        message = (f"the longest training example has {longest:,} tokens, past the model's window of {window:,} "
                   f"positions ({how}; cutoff_len {cfg.data.cutoff_len:,}): its later tokens train at positions the "
                   "model never saw; lower cutoff_len to the window to keep inside it")
        print(f"warning: {message}", file=sys.stderr, flush=True)
        cfg.decide("context_window", window, message)


def plan_long_context(cfg: RunConfig, model, tokens: int, budget_gib: float | None, state_gib: float,
                      fsdp: bool, longest: int = 0) -> LongContext:
    """Decide and apply tiling and its host layers; record both and the estimate. `state_gib`: the weights the run
    holds (training/speed_plan.held_state_gib); the trained weights' gradients and AdamW's moments are added here."""
    t = cfg.train
    check_window(cfg, text_config(model), longest)
    if cfg.method.finetuning_type != "full" and moe_shape(text_config(model)) is None:   # (full and MoE: counted)
        state_gib += 3 * held_gib(p for p in model.parameters() if p.requires_grad)
    on, why = decide_tiling(cfg, model, tokens, budget_gib, state_gib, fsdp)
    cfg.decide("sequence_tiling", on, why)
    config = text_config(model)
    ram = system_memory_gib()
    act_bytes = model.get_input_embeddings().weight.element_size()   # the residual stream's dtype
    if budget_gib is not None and (on or tokens >= PLAN_SHOWN_FROM_TOKENS):
        cfg.decide("long_context", f"longest cutoff_len on this GPU ({budget_gib:.0f} GiB, "
                                   f"{ram or 0:.0f} GiB RAM) by lever", describe_levers(
                                       config, state_gib, budget_gib, ram, t.sequence_tile_tokens, act_bytes))
    if not on:
        return LongContext(False)
    attach_tiling(model, tile=t.sequence_tile_tokens, min_tokens=t.sequence_tile_tokens)
    device = next(model.parameters()).device
    host, estimate, why = _host_layers(cfg, config, tokens, budget_gib, ram, state_gib, act_bytes, device)
    cfg.decide("activation_offloading", host > 0, why)
    x_bytes = tokens * config.hidden_size * act_bytes
    rotary = tokens * largest_head_dim(config) * act_bytes   # one of the cos and sin tables
    host_bytes = host * x_bytes + (2 * rotary if host else 0)   # layer 0's input, then the rotary tables it saves
    if host:
        offload_activations(model, device, max_bytes=host_bytes if host < config.num_hidden_layers else None)
    if estimate is not None:
        cfg.decide("memory_estimate", round(estimate.gpu_gib, 1), f"{tokens:,} tokens a micro-batch, tiles of "
                   f"{t.sequence_tile_tokens:,}: {estimate.describe()}")
    return LongContext(True, host, host_bytes, estimate)


def _host_layers(cfg: RunConfig, config, tokens: int, budget_gib: float | None, ram: float | None, state_gib: float,
                 act_bytes: int, device: torch.device) -> tuple[int, Estimate | None, str]:
    """How many layer inputs wait in host memory under tiling: none, all (activation_offloading: true), or by
    default the fewest that make the estimate fit the GPU; -> (count, the estimate, reason)."""
    t, layers = cfg.train, config.num_hidden_layers
    tile = t.sequence_tile_tokens
    if t.activation_offloading is False:
        return 0, tiled_estimate(config, tokens, state_gib, tile, 0, act_bytes), "activation_offloading: false"
    if device.type != "cuda":
        if t.activation_offloading:
            raise UserError(f"activation_offloading: true, but the model is on the {device.type.upper()}, which is "
                            "already host memory; set activation_offloading: false")
        return 0, None, f"off: the model is on the {device.type.upper()}, which is already host memory"
    if t.activation_offloading:
        return layers, tiled_estimate(config, tokens, state_gib, tile, layers, act_bytes), (
            f"activation_offloading: true: all {layers} layer inputs in pinned host memory")
    if budget_gib is None:
        return 0, None, "off: no GPU memory budget known"
    fit = fewest_host_layers(config, tokens, state_gib, budget_gib, ram, tile, act_bytes)
    if fit is None:
        everything = tiled_estimate(config, tokens, state_gib, tile, layers, act_bytes)
        return layers, everything, (f"on, all {layers} layer inputs in host memory, and still the estimate "
                                    f"({everything.describe()}) is above what the {budget_gib:.0f} GiB GPU and "
                                    f"{ram or 0:.0f} GiB of RAM allow: expect running out of memory; lower "
                                    "cutoff_len or max_tokens_per_batch")
    if fit.host_layers == 0:
        return 0, fit, "off: with tiled layers the micro-batch fits the GPU with every layer input on it"
    return fit.host_layers, fit, (f"on for the {fit.host_layers} lowest of {layers} layers' inputs "
                                  f"({fit.host_gib:.1f} GiB of pinned host memory): the fewest that make the tiled "
                                  "micro-batch fit the GPU; each is copied out and back beside the compute")
