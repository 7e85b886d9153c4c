"""Methods: LoRA (peft) on the chosen linear layers (with PiSSA's start, LLaMA Pro's blocks), OFT (peft), every weight
trainable (full) or some layers (freeze: model/freeze.py); loading a trained adapter.

Trainable weights are always fp32 (the frozen base may be bf16): Adam updates on bf16 weights lose most small
steps, and autocast handles the mixed matmuls.
"""

from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from steadytune.config import ConfigError, RunConfig, lora_alpha_of, show_value
from steadytune.errors import CheckpointError
from steadytune.model.anatomy import (
    SEQUENCE_SCORE,
    _ties_embeddings,
    linear_module_names,
    model_task,
    output_head_names,
)
from steadytune.model.archive import unpacked
from steadytune.model.freeze import apply_freeze, expanded_block_targets
from steadytune.model.vision import (
    all_linear_leaves,
    describe_trainable,
    freeze_forbidden,
    is_vision_model,
    lora_module_names,
    projector_modules,
    projector_trains_in_freeze,
    vision_freeze_reason,
)
from steadytune.model.moe.anatomy import expert_sites, router_module_names
from steadytune.model.moe.experts_lora import install_grouped_experts
from steadytune.model.moe.targets import (
    is_expert_name,
    linear_leaves_without_routers,
    plan_expert_targets,
    refuse_router_name,
    targets_as_written,
    written_for_fused_experts,
)
from steadytune.model.quantize import logical_numel
from steadytune.model.saved_weights import (
    _check_file_readable,
    _compare_shapes,
    _expected_adapter_shapes,
    _find_weight_files,
    _saved_shapes,
)

# ---------------------------------------------------------------------------------------------------------
# Methods: LoRA or full
# ---------------------------------------------------------------------------------------------------------

def attach_adapter(model: nn.Module, cfg: RunConfig) -> nn.Module:
    """finetuning_type lora -> a peft model with LoRA on the chosen linears; full -> every weight trainable; freeze
    -> some layers trainable (model/freeze.py); oft -> a peft model with OFT on the chosen linears.

    Trainable weights are always fp32 (the frozen base may be bf16): Adam updates on bf16 weights lose
    most small steps, and autocast handles the mixed matmuls."""
    method = cfg.method
    if method.finetuning_type == "full":
        for param in model.parameters():
            param.requires_grad_(True)
        frozen = freeze_forbidden(model, method)   # a vision-language model's frozen parts (model/vision.py)
        cfg.decide("trainable", "all parameters" + (f" but those named {','.join(frozen)}" if frozen else ""),
                   "finetuning_type: full" + (f"; {vision_freeze_reason(method)}" if frozen else ""))
    elif method.finetuning_type == "freeze":
        patterns, layers = apply_freeze(model, method.freeze_trainable_layers, method.freeze_trainable_modules,
                                        method.freeze_extra_modules, method.use_llama_pro)
        projector = projector_trains_in_freeze(model, method)
        for name, param in model.named_parameters():
            if any(p in name for p in projector):
                param.requires_grad_(True)
        frozen = freeze_forbidden(model, method)
        cfg.decide("trainable", ",".join(patterns + projector), f"finetuning_type: freeze: layers {layers}"
                   + (" (LLaMA Pro's expanded blocks)" if method.use_llama_pro else "")
                   + ", parameters whose names hold one of these parts (LLaMA-Factory's rule)"
                   + (f", none named {','.join(frozen)} ({vision_freeze_reason(method)})" if frozen else ""))
    elif method.finetuning_type == "oft":
        model = attach_oft(model, cfg)
    else:
        model = _attach_lora(model, cfg)
        install_grouped_experts(model, cfg.train.moe_grouped_mm)
    if not cfg.train.pure_bf16:   # pure_bf16: the trained weights stay bf16, as asked
        _cast_trainable_to_fp32(model)
    if is_vision_model(model):   # nothing of a vision-language model is frozen silently
        cfg.decide("trainable_parts", describe_trainable(model), vision_freeze_reason(cfg.method))
    return model


def _attach_lora(model: nn.Module, cfg: RunConfig) -> nn.Module:
    from peft import LoraConfig, TaskType, get_peft_model

    method = cfg.method
    targets = resolve_lora_targets(model, method.lora_target, method)
    requested = None if method.lora_target.strip() == "all" else _requested_names(method.lora_target)
    experts = plan_expert_targets(model, requested, set(targets), method.train_router)
    if experts.parameters and (method.lora_dropout or method.use_dora):
        key = "lora_dropout" if method.lora_dropout else "use_dora"
        raise ConfigError(f"{key}: {getattr(method, key)} with LoRA on the routed experts: peft's expert LoRA "
                          f"(target_parameters) has no {'dropout' if method.lora_dropout else 'DoRA'}; set {key}: "
                          f"{0 if method.lora_dropout else 'false'}, or leave the experts out of lora_target")
    vision = is_vision_model(model)
    if vision:
        cfg.decide("lora_target", f"{len(targets)} linear layers", f"lora_target: {method.lora_target} on a "
                   f"vision-language model: every such linear layer outside the frozen parts and the projector "
                   f"({vision_freeze_reason(method)}; LLaMA-Factory's find_all_linear_modules and "
                   "patch_target_modules)")
    elif requested is None:
        cfg.decide("lora_target", ",".join(targets + experts.parameters), "all = every linear layer except the output "
                   "head" + (" and the routers, and the routed experts' fused weights (peft's target_parameters); "
                             "differs from LLaMA-Factory, whose all takes modules with Linear in their class name only "
                             "and so leaves transformers 5's fused experts frozen" if experts.parameters else ""))
    for note in experts.notes:
        cfg.decide("lora_target_experts", requested, note)
    alpha = lora_alpha_of(cfg)
    if method.lora_alpha is None:
        cfg.decide("lora_alpha", alpha, "default: 2 x lora_rank")
    modules_to_save = resolve_additional_targets(model, method.additional_target)
    user_saved = bool(modules_to_save)   # (the tied-embedding rule below is about these, not a projector or router)
    if vision and not method.freeze_multi_modal_projector:
        projector = projector_modules(model)
        modules_to_save = (modules_to_save or []) + projector
        cfg.decide("freeze_multi_modal_projector", False, f"the projector ({', '.join(projector)}) trains in full, "
                   "saved with the adapter; differs from LLaMA-Factory 0.9.5, where this key leaves a LoRA run's "
                   "projector frozen under lora_target: all")
    if experts.routers:
        modules_to_save = (modules_to_save or []) + experts.routers
        cfg.decide("train_router", True, f"the routers ({', '.join(experts.routers)}) train in full, saved with the "
                   "adapter")
    # A reward model's score head is trained in full and saved with the adapter (peft adds it to modules_to_save).
    task_type = TaskType.SEQ_CLS if model_task(model) == SEQUENCE_SCORE else TaskType.CAUSAL_LM
    config = LoraConfig(task_type=task_type, r=method.lora_rank, lora_alpha=alpha,
                        lora_dropout=method.lora_dropout, target_modules=targets or None,
                        target_parameters=experts.parameters or None, use_rslora=method.use_rslora,
                        use_dora=method.use_dora, modules_to_save=modules_to_save,
                        # A trained copy of tied embeddings must stay tied to the output head, or the two drift.
                        ensure_weight_tying=user_saved and _ties_embeddings(model))
    if method.use_llama_pro:
        if experts.parameters:
            raise ConfigError("use_llama_pro with LoRA on the routed experts is not supported; leave the experts out "
                              "of lora_target")
        config.target_modules = expanded_block_targets(model, targets, method.freeze_trainable_layers)
        cfg.decide("lora_target", ",".join(config.target_modules), "use_llama_pro: LoRA on the expanded blocks only "
                   "(LLaMA-Factory's find_expanded_modules)")
    if method.pissa_init:
        config.init_lora_weights = "pissa" if method.pissa_iter == -1 else f"pissa_niter_{method.pissa_iter}"
        cfg.decide("pissa_init", config.init_lora_weights, "LoRA A and B start as the principal singular vectors of "
                   "each adapted weight, which keeps the residual (peft); the model's outputs are unchanged at step 0")
    with targets_as_written():   # resolved against this model's own layout: no transformers 4 renaming by peft
        return get_peft_model(model, config)


def attach_oft(model: nn.Module, cfg: RunConfig) -> nn.Module:
    """finetuning_type oft: peft's OFT on the chosen linears (LLaMA-Factory's OFTConfig arguments: oft_rank as r,
    oft_block_size, module_dropout, additional_target as modules_to_save)."""
    from peft import OFTConfig, TaskType, get_peft_model

    method = cfg.method
    written = "oft_target" if "oft_target" in cfg.user_keys else "lora_target"
    target = getattr(method, written)
    targets = resolve_lora_targets(model, target, method)
    if method.use_llama_pro:
        targets = expanded_block_targets(model, targets, method.freeze_trainable_layers)
    cfg.decide("oft_target", ",".join(targets), f"{written}: {target}" + (
        "" if written == "oft_target" else " (LLaMA-Factory 0.9.5 takes OFT's targets from lora_target)"))
    if (method.oft_rank == 0) == (method.oft_block_size == 0):
        raise ConfigError(f"oft_rank {method.oft_rank} and oft_block_size {method.oft_block_size}: set exactly one of "
                          "them (the other 0)")
    task_type = TaskType.SEQ_CLS if model_task(model) == SEQUENCE_SCORE else TaskType.CAUSAL_LM
    config = OFTConfig(task_type=task_type, r=method.oft_rank, oft_block_size=method.oft_block_size,
                       target_modules=targets, module_dropout=method.module_dropout,
                       modules_to_save=resolve_additional_targets(model, method.additional_target))
    try:
        with targets_as_written():
            return get_peft_model(model, config)
    except ValueError as e:   # a layer width that no block size divides, said by peft
        raise ConfigError(f"finetuning_type: oft: {str(e).splitlines()[0]}") from None


def _requested_names(lora_target: str) -> list[str]:
    return [t.strip() for t in lora_target.split(",") if t.strip()]


def resolve_lora_targets(model: nn.Module, lora_target: str, method=None) -> list[str]:
    """The linear layers LoRA adapts: `all` -> the distinct leaf names of every linear but the head and a mixture of
    experts' linear routers (full names if a leaf name is ambiguous); a comma list -> checked against the model's
    linear layers, where a name of the routed experts' fused weights (experts, gate_up_proj, ...) is no linear layer
    and is left to model/moe/targets.py. A vision-language model: the full names of the layers outside its frozen
    parts (`method`'s freeze_* keys; LLaMA-Factory's defaults when None), as model/vision.py chooses them."""
    linears = linear_module_names(model)
    leaf = lambda name: name.rsplit(".", 1)[-1]  # noqa: E731
    if is_vision_model(model):
        method = method or VisionDefaults(lora_target)
        if lora_target.strip() != "all":
            _check_requested_linears(model, _requested_names(lora_target), linears)
        wanted = all_linear_leaves(model, method) if lora_target.strip() == "all" else _requested_names(lora_target)
        return lora_module_names(model, wanted, method)
    if lora_target.strip() == "all":
        if not linears and not expert_sites(model):
            raise ConfigError("lora_target: all: the model has no linear layers besides the output head")
        leaves = linear_leaves_without_routers(model, sorted({leaf(n) for n in linears}))
        head_leaves = {leaf(n) for n in output_head_names(model)}
        if head_leaves & set(leaves):
            routers = set(router_module_names(model))
            return sorted(n for n in linears if n not in routers)
        return leaves
    requested = _requested_names(lora_target)
    if not requested:
        raise ConfigError(f"lora_target: empty list ({show_value(lora_target)}); use all or names like q_proj,v_proj")
    heads = output_head_names(model)
    known_leaves = sorted({leaf(n) for n in linears})
    linear_targets = []
    for target in requested:
        if any(h == target or h.endswith("." + target) for h in heads):
            raise ConfigError(f"lora_target: {target} is the output head (tied to the embeddings or the vocabulary "
                              "projection); LoRA targets hidden linear layers")
        refuse_router_name(model, target)
        is_linear = any(n == target or n.endswith("." + target) for n in linears)
        if is_linear:
            linear_targets.append(target)
        elif not is_expert_name(model, target):
            experts = " (and the routed experts: experts, gate_up_proj, down_proj)" if expert_sites(model) else ""
            raise ConfigError(f"lora_target: no linear layer named {show_value(target)} in this model "
                              f"(linear layers: {', '.join(known_leaves)}{experts})")
    return linear_targets


def _check_requested_linears(model: nn.Module, requested: list[str], linears: list[str]) -> None:
    """Each name of a lora_target list is a linear layer of the model (its leaf name), else one line listing them."""
    known = sorted({n.rsplit(".", 1)[-1] for n in linears})
    for target in requested:
        if not any(n == target or n.endswith("." + target) for n in linears):
            raise ConfigError(f"lora_target: no linear layer named {show_value(target)} in this model "
                              f"(linear layers: {', '.join(known)})")


@dataclass
class VisionDefaults:
    """LLaMA-Factory's freeze_* defaults, where a caller has no method section (an estimate before the run)."""
    lora_target: str = "all"
    freeze_vision_tower: bool = True
    freeze_multi_modal_projector: bool = True
    freeze_language_model: bool = False


def resolve_additional_targets(model: nn.Module, additional_target: Optional[str]) -> Optional[list[str]]:
    if not additional_target:
        return None
    names = [t.strip() for t in additional_target.split(",") if t.strip()]
    modules = [n for n, _ in model.named_modules()]
    for target in names:
        if not any(n == target or n.endswith("." + target) for n in modules):
            raise ConfigError(f"additional_target: no module named {show_value(target)} in this model")
    return names


def _cast_trainable_to_fp32(model: nn.Module) -> None:
    for param in model.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """-> (trainable, total) parameter counts; shared (tied) weights count once; ZeRO-3 shards count in full."""
    trainable = total = 0
    for param in model.parameters():  # parameters() yields a tied weight once
        n = getattr(param, "ds_numel", None) or logical_numel(param)   # a 4-bit weight holds two a byte
        total += n
        if param.requires_grad:
            trainable += n
    return trainable, total


# ---------------------------------------------------------------------------------------------------------
# Trained adapters and checkpoints
# ---------------------------------------------------------------------------------------------------------

def load_trained_adapter(model: nn.Module, adapter_dir: str | os.PathLike, is_trainable: bool = False,
                         allow_pickle: bool = False) -> nn.Module:
    """PeftModel.from_pretrained with errors that say which folder does not fit which model.

    `adapter_dir` may also be an adapter archive (`steadytune export --archive`): it is verified against its
    manifest and unpacked first. Weights are read from safetensors; adapter_model.bin only with `allow_pickle`."""
    from peft import PeftModel

    adapter_dir = unpacked(adapter_dir)
    if adapter_dir.is_file():
        raise CheckpointError(f"{adapter_dir} is a file; name the adapter folder (or its .tar.gz archive)")
    if not (adapter_dir / "adapter_config.json").is_file():
        raise CheckpointError(f"{adapter_dir}: no adapter_config.json (not a LoRA adapter folder)")
    weights = _find_weight_files(adapter_dir)
    if not weights:
        if (adapter_dir / "adapter_model.bin").is_file() and not allow_pickle:
            raise CheckpointError(f"{adapter_dir}: the adapter is a pickle file (adapter_model.bin), which can run code "
                                  "when loaded; steadytune reads adapter_model.safetensors. Set allow_pickle_weights: "
                                  "true if you trust the file")
        if not (adapter_dir / "adapter_model.bin").is_file():
            raise CheckpointError(f"{adapter_dir}: no adapter_model.safetensors")
    for file in weights:
        _check_file_readable(file)
    # An adapter for transformers 5's fused experts is read as written (model/moe/targets.py: targets_as_written).
    fused_layout = written_for_fused_experts(adapter_dir)
    with targets_as_written(fused_layout):
        if weights:  # a pickle adapter (allowed) has no header to check shapes against; peft's own errors remain
            expected = _expected_adapter_shapes(model, adapter_dir)
            _compare_shapes(adapter_dir, _saved_shapes(weights), expected, what="adapter")
    try:
        with targets_as_written(fused_layout):
            loaded = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=is_trainable)
    except (pickle.UnpicklingError, EOFError) as e:
        # allow_pickle_weights: true, and still torch's weights_only loader refuses what the pickle holds (a class, a
        # function call): nothing in it ran. Its message spans many lines; the reason is the "Unsupported ..." one.
        refused = re.search(r"(Unsupported [^\n]*?)(?: was not an allowed global| \(|\n|$)", str(e))
        why = refused.group(1) if refused else (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise CheckpointError(f"{adapter_dir / 'adapter_model.bin'}: torch's weights_only loader refused this pickle "
                              f"({why}); nothing in it was run. Load the adapter from adapter_model.safetensors, "
                              "saved from a copy you trust") from None
    except (RuntimeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{adapter_dir}: adapter does not fit the base model: {str(e).splitlines()[0]}") from None
    install_grouped_experts(loaded)   # a mixture of experts' adapted experts as grouped matmuls (model/moe/)
    if is_trainable:
        _cast_trainable_to_fp32(loaded)  # as for a fresh adapter: small updates must not round away in bf16
    return loaded


# ---------------------------------------------------------------------------------------------------------
# PiSSA's starting adapter and its conversion (LLaMA-Factory's PissaConvertCallback)
# ---------------------------------------------------------------------------------------------------------

def save_pissa_start(model: nn.Module, output_dir: str | os.PathLike) -> None:
    """pissa_convert: the adapter PiSSA started from, in output_dir/pissa_init (a resume writes the same one again:
    the same seed and base make the same start)."""
    from pathlib import Path

    config = model.peft_config["default"]
    init = config.init_lora_weights
    config.init_lora_weights = True   # the folder is a plain adapter: loading it must not run PiSSA again
    try:
        model.save_pretrained(Path(output_dir) / "pissa_init", safe_serialization=True)
    finally:
        config.init_lora_weights = init


def save_pissa_converted(model: nn.Module, output_dir: str | os.PathLike) -> None:
    """pissa_convert: the trained PiSSA adapter as a plain LoRA adapter of the original base (rank 2r, peft's
    conversion against output_dir/pissa_init), in output_dir/pissa_converted."""
    from pathlib import Path

    out = Path(output_dir)
    model.save_pretrained(out / "pissa_converted", safe_serialization=True,
                          path_initial_model_for_weight_conversion=str(out / "pissa_init"))
