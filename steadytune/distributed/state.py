"""Checkpoint state under sharding: gather it whole for saving, scatter it back on resume.

A checkpoint holds the full trainable weights and the full optimizer state, written by the main process, whatever
the sharding: so it resumes on any number of GPUs and under any sharding (ZeRO-3 on 2 GPUs -> DDP on 1), and its
adapter loads like a one-GPU run's. Gathering is a collective: every rank calls these functions; only the main
process gets the tensors (the others get empty dicts).

Optimizer state comes in two layouts:
- one GPU and DDP: torch's own `optimizer.state_dict()`, keyed by parameter index (what training/checkpoint.py writes);
- FSDP2 and DeepSpeed: the same tensors keyed by parameter name ("base_model.model...lora_A.default.weight"), the
  layout of torch.distributed.checkpoint's full optimizer state dict.
`by_name` and `by_index` convert between them through the names of the trainable parameters in optimizer order (the
recipe builds its AdamW from `[p for p in model.parameters() if p.requires_grad]`), so either loads into either.
"""

from __future__ import annotations

from typing import Any

import torch

from steadytune.model.anatomy import tied_aliases
from steadytune.training.optimizer_state import by_name, trainable_names

OBJECTIVE_PREFIX = "model."   # the recipe's TrainingObjective holds the model as `.model`


# ---------------------------------------------------------------------------------------------------------
# FSDP2 (torch.distributed.checkpoint's state-dict API)
# ---------------------------------------------------------------------------------------------------------

def _full_options(**extra):
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    return StateDictOptions(full_state_dict=True, **extra)


def fsdp_gather(objective, optimizer, main: bool, with_optimizer: bool = True) -> tuple[dict, dict]:
    """-> (trainable weights by name, optimizer state by name), full, on the CPU of the main process."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    names = {OBJECTIVE_PREFIX + n for n in trainable_names(objective.model)}
    weights = get_model_state_dict(objective, options=_full_options(cpu_offload=True, ignore_frozen_params=True))
    optim = get_optimizer_state_dict(objective, _plain(optimizer), options=_full_options(cpu_offload=True)) \
        if with_optimizer else {"state": {}, "param_groups": []}
    if not main:
        return {}, {}
    weights = {k.removeprefix(OBJECTIVE_PREFIX): v for k, v in weights.items() if k in names}
    optim = {"state": {k.removeprefix(OBJECTIVE_PREFIX): v for k, v in optim["state"].items()},
             "param_groups": [{**g, "params": [p.removeprefix(OBJECTIVE_PREFIX) for p in g["params"]]}
                              for g in optim["param_groups"]]}
    return weights, optim


def fsdp_scatter(objective, optimizer, weights: dict, optimizer_state: dict | None) -> None:
    """Load full (unsharded) trainable weights and optimizer state into an FSDP2 model; every rank passes the same
    full dicts (each reads the checkpoint)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    set_model_state_dict(objective, {OBJECTIVE_PREFIX + k: v for k, v in weights.items()},
                         options=_full_options(strict=False))
    if optimizer_state is not None:
        state = by_name(optimizer_state, trainable_names(objective.model))
        state = {"state": {OBJECTIVE_PREFIX + k: v for k, v in state["state"].items()},
                 "param_groups": [{**g, "params": [OBJECTIVE_PREFIX + p for p in g["params"]]}
                                  for g in state["param_groups"]]}
        set_optimizer_state_dict(objective, _plain(optimizer), state, options=_full_options())


# ---------------------------------------------------------------------------------------------------------
# DeepSpeed (its public fragment API: deepspeed.utils.safe_get/set_full_*)
# ---------------------------------------------------------------------------------------------------------

ADAM_STATES = ("exp_avg", "exp_avg_sq")


def deepspeed_gather(engine, main: bool, with_optimizer: bool = True) -> tuple[dict, dict]:
    """-> (trainable weights by name in fp32, optimizer state by name) on the main process. The fp32 master
    weights, not the bf16/fp16 working copies: the adapter is the same one a one-GPU run saves."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    model = engine.module.model
    base = _base_optimizer(engine)
    weights, state = {}, {}
    step = _adam_step(base)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        full = safe_get_full_fp32_param(p)                  # a collective under ZeRO-3
        moments = {k: safe_get_full_optimizer_state(p, k) for k in ADAM_STATES} if with_optimizer else {}
        if full is None:                                    # ZeRO-0 in fp32: the engine uses the optimizer as is
            full = p.detach()
            moments = {k: base.state.get(p, {}).get(k) for k in ADAM_STATES} if with_optimizer else {}
        if main:
            weights[name] = full.detach().float().cpu().clone()
            if moments and all(m is not None for m in moments.values()) and step is not None:
                state[name] = {"step": step.clone().cpu(), **{k: m.detach().float().cpu().clone()
                                                              for k, m in moments.items()}}
    if not main:
        return {}, {}
    group = {k: v for k, v in base.param_groups[0].items() if k != "params"}
    return weights, {"state": state, "param_groups": [{**group, "params": list(weights)}]}


def deepspeed_scatter(engine, weights: dict, optimizer_state: dict | None) -> None:
    """Load full weights (fp32) and Adam state into a DeepSpeed engine: the working copy (gathered and re-partitioned
    under ZeRO-3), the fp32 master and the moments. Every rank passes the same full dicts."""
    import deepspeed
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    model = engine.module.model
    names = trainable_names(model)
    moments = {}
    if optimizer_state is not None:
        moments = by_name(optimizer_state, names)["state"]
    base = _base_optimizer(engine)
    if moments:
        _create_adam_state(engine, base)
    for name, p in model.named_parameters():
        if not p.requires_grad or name not in weights:
            continue
        value = weights[name].to(engine.device)
        if hasattr(p, "ds_id"):   # ZeRO-3: gather the partitioned working copy, write it on rank 0, re-partition
            with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                if engine.global_rank == 0:
                    p.data.copy_(value.to(p.dtype))
        else:
            p.data.copy_(value.to(p.dtype))
        safe_set_full_fp32_param(p, value.float())
        for key in ADAM_STATES:
            saved = moments.get(name, {}).get(key)
            if saved is not None:
                safe_set_full_optimizer_state(p, saved.to(engine.device).float(), key)
    if optimizer_state is not None and optimizer_state.get("param_groups"):
        # The learning rate and the other hyperparameters as they were (the schedule sets lr only after a step).
        saved_group = {k: v for k, v in optimizer_state["param_groups"][0].items() if k != "params"}
        for group in base.param_groups:
            group.update({k: v for k, v in saved_group.items() if k in group})
    step = next((s["step"] for s in moments.values() if "step" in s), None)
    if step is not None:
        for per_param in base.state.values():
            if "step" in per_param:
                per_param["step"] = step.clone().to(per_param["step"].device) if torch.is_tensor(
                    per_param["step"]) else int(step)


def _create_adam_state(engine, base) -> None:
    """torch's AdamW creates its state at the first step; a resumed engine has not stepped yet, so create it (zeros,
    as AdamW would) on DeepSpeed's fp32 partitions, then let DeepSpeed link each parameter's fragment to it (what it
    does itself after its first step), so the saved moments can be written in."""
    zero = engine.optimizer
    flats = next((list(getattr(zero, name)) for name in ("fp32_partitioned_groups_flat",        # ZeRO-3
                                                         "single_partition_of_fp32_groups",     # ZeRO-1/2
                                                         "fp32_groups_flat_partition")          # bf16 optimizer
                  if getattr(zero, name, None)), [p for g in base.param_groups for p in g["params"]])
    group = base.param_groups[0]
    on_device = bool(group.get("fused") or group.get("capturable"))
    for flat in flats:
        if base.state.get(flat):
            continue
        state = {"step": torch.zeros((), dtype=torch.float32, device=flat.device if on_device else "cpu"),
                 "exp_avg": torch.zeros_like(flat, memory_format=torch.preserve_format),
                 "exp_avg_sq": torch.zeros_like(flat, memory_format=torch.preserve_format)}
        if group.get("amsgrad"):
            state["max_exp_avg_sq"] = torch.zeros_like(flat, memory_format=torch.preserve_format)
        base.state[flat] = state
    link = getattr(zero, "_lazy_init_hp_params_optimizer_state", None)   # ZeRO-1/2 and the bf16 optimizer
    if link is not None:
        link()


def _base_optimizer(engine):
    """The torch optimizer under DeepSpeed's ZeRO / bf16 wrappers."""
    optimizer = engine.optimizer
    while hasattr(optimizer, "optimizer") and not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


def _adam_step(base) -> torch.Tensor | None:
    for per_param in base.state.values():
        step = per_param.get("step")
        if step is not None:
            return step.detach() if torch.is_tensor(step) else torch.tensor(float(step))
    return None


def _plain(optimizer: Any):
    """Accelerate's optimizer wrapper -> the torch optimizer inside."""
    return getattr(optimizer, "optimizer", optimizer)


# ---------------------------------------------------------------------------------------------------------
# What training/checkpoint.py and save_final_outputs write, for gathered state
# ---------------------------------------------------------------------------------------------------------

class GatheredModel:
    """Stands in for the model where training/checkpoint.py and the final save call `save_pretrained`: writes the same files
    (PEFT's adapter files, or transformers' model files) from gathered full weights."""

    def __init__(self, model, weights: dict):
        self.model, self.weights = model, weights

    def save_pretrained(self, path, **kwargs):
        if hasattr(self.model, "peft_config"):
            # PEFT keeps only the adapter's keys of what it is given; names carry PEFT's own prefix already.
            return self.model.save_pretrained(path, state_dict=self.weights, **kwargs)
        # A tied weight (Qwen's and Gemma's output head is the input embedding) is one parameter under two names;
        # only its first name was gathered. Its other name must not bring the rank's empty ZeRO-3 shard along: it is
        # left out, as transformers' own save leaves it out, and the tie is restored on load.

        aliases = tied_aliases(self.model)
        full = {k: v for k, v in self.model.state_dict().items()
                if k not in self.weights and aliases.get(k) not in self.weights}
        full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu() for k, v in full.items()}
        return self.model.save_pretrained(path, state_dict={**full, **self.weights}, **kwargs)

    def named_parameters(self):
        return iter(self.weights.items())


class GatheredOptimizer:
    """Stands in for the optimizer where training/checkpoint.py calls `state_dict()`."""

    def __init__(self, state: dict):
        self.state = state

    def state_dict(self) -> dict:
        return self.state
