"""The speed policy (hardware/speed.py) applied to a run: static shapes for the collator, compiled layers, liger's
kernels, then gradient checkpointing for the memory that leaves; every choice recorded with its reason. A requested
feature that cannot be used is an error, never a silent skip."""

from __future__ import annotations

import math

import torch

from steadytune.config import RunConfig, lf_checkpointing_note
from steadytune.errors import UserError
from steadytune.hardware.attention_kernels import varlen_kernel_status, varlen_static_status
from steadytune.hardware.memory import choose_gradient_checkpointing, dequantised_experts_gib, held_gib
from steadytune.hardware.moe_shape import moe_shape
from steadytune.hardware.quantization import quantized_memory, speed_blockers
from steadytune.hardware.speed import SpeedPlan, SpeedUnavailable, plan_speed
from steadytune.model.anatomy import text_config
from steadytune.model.fp8_base import config_blocker, decide_fp8_base, fp8_copies_gib, restore_base
from steadytune.model.fused_swiglu import decide_fused_swiglu
from steadytune.model.kernels import apply_liger_kernels, compile_layers, uncompile_layers
from steadytune.model.offload import HostOffload, plan_activation_offloading, remove_offloading
from steadytune.model.shared_input import decide_shared_input, shared_input_blocker
from steadytune.model.tiling import remove_tiling
from steadytune.training.batches import TrainBatches
from steadytune.training.long_context import plan_long_context
from steadytune.training.optimizers import graph_blockers as method_graph_blockers
from steadytune.model.vision_attention import restore_vision_attention
from steadytune.training.vision_speed import decide_vision_speed, plan_vision


def graph_blockers(cfg: RunConfig, fsdp: bool) -> dict[str, str]:
    """What rules CUDA graphs out for this run: anything that must run eagerly between forward and backward."""
    f, blockers = cfg.fault_injection, {}
    if any(step is not None for step in (f.nan_loss_step, f.inf_loss_step, f.spike_loss_step)):
        blockers["faults"] = "fault_injection corrupts the loss between forward and backward"
    if cfg.train.cp_size > 1:
        blockers["cp_size"] = "sequence parallelism's attention runs collectives inside the forward and backward"
    if cfg.train.ep_size > 1:
        blockers["ep_size"] = "expert parallelism exchanges tokens between processes inside each MoE layer"
    if cfg.method.deepspeed:
        blockers["deepspeed"] = "DeepSpeed runs its own backward"
    if fsdp:
        # FSDP2's hooks gather and free shards around every layer (a 1-GPU FSDP run failed under graphs on the H200)
        blockers["fsdp"] = "FSDP's hooks gather and free parameter shards between the kernels"
    if cfg.method.lora_dropout > 0 or cfg.method.use_dora:
        blockers["adapter"] = "lora_dropout and DoRA have not been tried under graphs"
    if cfg.method.stage == "kto":
        # kto's answers and KL pairs go through two forwards of different shapes, and its objective records metrics
        # as it computes: dynamic shapes, no CUDA graph. (dpo and rm compute into fixed pair slots: graphable.)
        blockers["stage"] = "stage kto records its metrics inside the step"
    blockers.update(method_graph_blockers(cfg))   # BAdam, layer-wise GaLore/APOLLO, the DFT/EAFT/ASFT losses
    quantized = speed_blockers(cfg.model.quantization_bit).get("cuda_graphs")
    if quantized:
        blockers["quantization"] = quantized
    if cfg.method.stage == "grpo":
        blockers["stage"] = ("stage grpo trains on completions generated each step, whose lengths vary (its "
                             "generation has CUDA graphs of its own: model/decode/)")
    return blockers


def apply_speed_plan(cfg: RunConfig, model, info, precision: str, packing, batches: TrainBatches,
                     world_size: int, micro_batches: int, shard_plan=None, fsdp: bool = False) -> SpeedPlan:
    """Decide the run's speed features (plan_speed) and apply them to `model` and `batches`."""
    t = cfg.train
    attention = packing.attention if packing is not None else None
    static_ok, shape = (True, ""), None
    if cfg.method.stage == "kto":
        static_ok = (False, "stage kto runs two forwards of different shapes per micro-batch")
    if cfg.method.stage == "grpo":
        static_ok = (False, "stage grpo's sequences are generated each step: their lengths are not known in advance")
    vision = plan_vision(model, batches, info.backend)   # a vision-language model (training/vision_speed.py)
    if vision is not None and static_ok[0]:
        static_ok = vision.static_ok
    if static_ok[0] and attention == "varlen":
        static_ok = varlen_static_status(varlen_kernel_status()[0] or "")
    if static_ok[0] and attention in ("varlen", "sdpa"):
        shape = batches.static_shape_for(math.ceil(micro_batches / max(batches.batches_per_epoch(), 1)) + 1)
    # Long context first: tiled layers run eagerly, outside compile and graphs (training/long_context.py).
    budget = info.primary.budget_gib if info.primary is not None else None
    tokens = batches.max_tokens or t.per_device_train_batch_size * max(batches.lengths)
    long = plan_long_context(cfg, model, tokens, budget, held_state_gib(cfg, model, precision), fsdp,
                             longest=max(batches.lengths))
    compile_asked, no_compile = t.torch_compile, speed_blockers(cfg.model.quantization_bit).get("torch_compile")
    if t.cp_size > 1:
        no_compile = "sequence parallelism's attention exchanges heads or keys between processes inside each layer"
    if t.ep_size > 1:
        no_compile = "expert parallelism reads each MoE layer's token counts back to the host for its all-to-all"
    if long.tiling:
        no_compile = "sequence_tiling runs its layers eagerly, a tile at a time"
        if t.shared_input_projections:
            raise UserError("shared_input_projections: true with sequence_tiling: the tiled layers call q, k and v "
                            "apart; set one of them false")
    if no_compile and compile_asked:
        raise UserError(f"torch_compile: true, but {no_compile}: the compiler breaks its graph at every such matmul; "
                        "set torch_compile: false (or quantization_bit: 4)")
    if no_compile:
        compile_asked = False
    try:
        hooks = world_size > 1 and not (shard_plan is not None and shard_plan.flat_gradients)
        plan = plan_speed(info.backend, attention, micro_batches, world_size, precision, gradient_hooks=hooks,
                          compile_asked=compile_asked, graphs_asked=t.cuda_graphs, liger_asked=t.use_liger_kernel,
                          tuning_asked=t.kernel_tuning, recompute_asked=t.recompute_pointwise,
                          shared_asked=False if long.tiling else t.shared_input_projections,
                          blockers={**graph_blockers(cfg, fsdp), **(vision.graph_blockers if vision else {}),
                                    **({"tiling": "sequence_tiling's tiles are not recorded"} if long.tiling else {})},
                          static_ok=static_ok,
                          static_fill=shape.fill if shape else None)
    except SpeedUnavailable as e:
        raise UserError(str(e)) from None
    if no_compile:
        plan.reasons["torch_compile"] = f"off: {no_compile}"
    if plan.static_shapes:
        batches.use_static_shape(shape)
        plan.reasons["static_shapes"] += f" ({shape.describe()})"
    if plan.liger:
        applied, why = apply_liger_kernels(model)
        if not applied and t.use_liger_kernel:
            raise UserError(f"use_liger_kernel: true, but {why}; set use_liger_kernel: false")
        plan.liger, plan.reasons["use_liger_kernel"] = applied, why if applied else f"off: {why}"
    if plan.compile:
        compiled, why = compile_layers(model, static_shapes=plan.static_shapes, tune=plan.kernel_tuning,
                                       recompute_pointwise=plan.recompute_pointwise)
        if not compiled:
            raise UserError(f"torch_compile: true, but {why}; set torch_compile: false")
        plan.reasons["torch_compile"] += f" ({why})"
    plan.decide_into(cfg)
    decide_vision_speed(cfg, model, vision, batches.static_shape)

    # Checkpointing last: compiled layers keep less for backward, and small compiled models recompute cheaply.
    if plan.static_shapes:
        tokens = batches.static_shape.tokens
    # An APU's memory is what it can map (GTT), not the small carve-out tools print (GPU.budget_gib).
    state = held_state_gib(cfg, model, precision)
    # fp8 for the frozen base before checkpointing: its copies are buffers (2 bytes a base weight) that the memory
    # policy must count. (The layers compile lazily, at the first forward, so they still trace the fp8 matmuls.)
    state += plan_fp8_base(cfg, model, plan, precision, shard_plan, tokens, budget, state)
    plan_shared_input(cfg, model, plan, shard_plan.kind if shard_plan is not None else None)
    plan_fused_swiglu(cfg, model, plan, shard_plan.kind if shard_plan is not None else None)
    use, why = choose_gradient_checkpointing(text_config(model), tokens, budget, t.gradient_checkpointing,
                                             compiled=plan.compile, state_gib=state,
                                             recompute_pointwise=plan.recompute_pointwise)
    if t.activation_offloading and t.gradient_checkpointing is None:
        use, why = True, "on: activation_offloading: true keeps what checkpointing saves in host memory"
    if long.tiling:
        # a tiled layer keeps only its input and recomputes its forward once: checkpointing it again would recompute
        # twice (micro-batches too short to tile are short enough not to need it)
        use, why = False, "off: sequence_tiling's layers keep only their input, as checkpointing would"
    cfg.decide("gradient_checkpointing", use, why + ("" if long.tiling else lf_checkpointing_note(t, use)))
    offloading = long.host_layers > 0 if long.tiling else (
        plan_offloading(cfg, model, plan, use, tokens, budget, state, fsdp) is not None)
    m = cfg.model
    if m.quantization_bit is not None and hasattr(text_config(model), "intermediate_size") and not long.tiling:
        base_bytes = 2.0 if precision == "bf16" else 4.0   # embeddings, head and norms stay in the load dtype
        need, parts = quantized_memory(text_config(model), tokens, cfg.method.lora_rank, use,
                                       m.quantization_bit, m.double_quantization, base_bytes, plan.compile,
                                       plan.recompute_pointwise, offloaded=offloading)
        cfg.decide("memory_estimate", need, parts)
    if use:
        enable_gradient_checkpointing(cfg, model, graphs=plan.cuda_graphs)
    return plan


def held_state_gib(cfg: RunConfig, model, precision: str) -> float:
    """GiB the run holds beside its activations: the weights, with full fine-tuning their gradients and AdamW's
    moments, a mixture of experts' LoRA state, the buffers."""
    state = held_gib(model.parameters())
    if cfg.method.finetuning_type == "full":
        state *= 4  # every weight also has a gradient and AdamW's two moments, all in the weights' dtype
    elif moe_shape(text_config(model)) is not None:
        # LoRA's gradients and AdamW's moments: GiB for every expert's pair of a mixture of experts (a dense model's
        # are under 2% of its weights, and its thresholds were measured without them); with 4-bit experts, one
        # layer's expert weight dequantised at a time
        state += 3 * held_gib(p for p in model.parameters() if p.requires_grad)
        if cfg.model.quantization_bit == 4:
            state += dequantised_experts_gib(text_config(model), 2.0 if precision in ("bf16", "fp16") else 4.0)
    return state + held_gib(model.buffers())


def plan_fp8_base(cfg: RunConfig, model, plan: SpeedPlan, precision: str, shard_plan, tokens: int,
                  budget: float | None, state_gib: float) -> float:
    """fp8_base as asked, or by default (model/fp8_base.decide_fp8_base); records the decision; -> GiB of copies
    (fp8_copies_gib, counted before the swap: over a 4-bit base only the scales are new, while the layers it swaps
    in also hold bitsandbytes' own packed bytes and statistics as buffers)."""
    ruled_out = config_blocker(cfg, shard_plan.kind if shard_plan is not None else None)
    # only where it may go on: a ZeRO-3 model's weights are empty placeholders until gathered
    copies = fp8_copies_gib(model) if ruled_out is None and cfg.train.fp8_base is not False else 0.0
    on, why = decide_fp8_base(model, cfg.train.fp8_base, next(model.parameters()).device, precision, plan.compile,
                              tokens, budget, state_gib, cfg.train.gradient_checkpointing, ruled_out=ruled_out)
    cfg.decide("fp8_base", on, why)
    return copies if on else 0.0


def plan_offloading(cfg: RunConfig, model, plan: SpeedPlan, checkpointing: bool, tokens: int,
                    budget: float | None, state_gib: float, fsdp: bool) -> HostOffload | None:
    """activation_offloading for this run (model/offload.plan_activation_offloading), recorded with its reason."""
    sharded = "DeepSpeed" if cfg.method.deepspeed else ("FSDP" if fsdp else None)
    try:
        offload, why = plan_activation_offloading(model, plan, checkpointing, tokens, budget, state_gib,
                                                  cfg.train.activation_offloading, sharded)
    except SpeedUnavailable as e:
        raise UserError(f"activation_offloading: true, but {e}; set activation_offloading: false") from None
    cfg.decide("activation_offloading", offload is not None, why)
    return offload


def plan_shared_input(cfg: RunConfig, model, plan: SpeedPlan, shard_kind: str | None) -> None:
    """Group the LoRA layers that read the same input where the plan says so (model/shared_input.py), after the fp8
    base (whose copies the groups merge); records the decision."""
    key, m = "shared_input_projections", cfg.method
    on, why = decide_shared_input(model, plan.shared_input, plan.reasons[key],
                                  shared_input_blocker(m.finetuning_type, m.use_dora, m.lora_dropout, shard_kind))
    if cfg.train.shared_input_projections and not on:
        raise UserError(f"shared_input_projections: true, but {why.removeprefix('off: ')}; "
                        "set shared_input_projections: false")
    plan.shared_input = on
    cfg.decide(key, on, why)


def enable_gradient_checkpointing(cfg: RunConfig, model: torch.nn.Module, graphs: bool = False) -> None:
    kwargs = {"use_reentrant": cfg.model.use_reentrant_gc, **(cfg.train.gradient_checkpointing_kwargs or {})}
    if graphs:
        # The recompute would save and restore the CUDA RNG state, which a graph cannot record; with no dropout
        # (graphs are off with lora_dropout) nothing random runs in the forward.
        kwargs["preserve_rng_state"] = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()


def checkpoint_after_graph_oom(cfg: RunConfig, model: torch.nn.Module) -> str | None:
    """Recording a CUDA graph ran out of memory (graphs.GraphRunner's on_out_of_memory): turn gradient checkpointing
    on and record why, so that the recording is tried again; None where it is on already (nothing left to free)."""
    if cfg.decisions.get("gradient_checkpointing", {}).get("value"):
        return None
    enable_gradient_checkpointing(cfg, model, graphs=True)
    cfg.decide("gradient_checkpointing", True, "on: recording the CUDA graph ran out of memory without it")
    return "gradient checkpointing turned on"


def choose_base_dtype(cfg: RunConfig, precision: str) -> torch.dtype:
    """The frozen base weights' dtype: bf16 for LoRA under bf16 unless lora_base_dtype says float32 (full
    fine-tuning and fp16/fp32 runs keep fp32 weights: the optimizer updates them, or loss scaling needs them)."""
    if cfg.train.pure_bf16:
        if precision == "fp16":
            raise UserError("pure_bf16: true and fp16 mixed precision disagree; set fp16: false")
        cfg.decide("pure_bf16", True, "every weight in bf16, the trained ones too (no fp32 copies): LLaMA-Factory's "
                   "pure_bf16")
        return torch.bfloat16
    if precision != "bf16" or cfg.method.finetuning_type != "lora":
        return torch.float32
    if cfg.train.lora_base_dtype == "float32":
        cfg.decide("lora_base_dtype", "float32", "an fp32 copy of the base under bf16 autocast (asked for): residual "
                   "stream and norms in fp32, twice the base weights' memory")
        return torch.float32
    return torch.bfloat16


def plan_fused_swiglu(cfg: RunConfig, model, plan: SpeedPlan, shard_kind: str | None) -> None:
    """The fused LoRA SwiGLU where it applies (model/fused_swiglu.py), after the fp8 base it multiplies over;
    records the decision. The plain LoRA case only, as for the shared-input groups."""
    m, asked = cfg.method, cfg.train.fused_swiglu
    plain = shared_input_blocker(m.finetuning_type, m.use_dora, m.lora_dropout, shard_kind)
    if plain is not None:
        on, why = False, f"off: {plain}"
    else:
        on, why = decide_fused_swiglu(model, asked, next(model.parameters()).device, plan.compile)
    if asked and not on:
        raise UserError(f"fused_swiglu: true, but {why.removeprefix('off: ')}; set fused_swiglu: false")
    cfg.decide("fused_swiglu", on, why)


def undo_speed_plan(model: torch.nn.Module) -> str | None:
    """After training: the layers uncompiled (scoring and generation come in many shapes), the bf16 base put back
    where fp8_base made fp8 copies (the adapter will be used on it), activation offloading removed. -> what
    offloading moved a micro-batch, for the console, or None."""
    uncompile_layers(model)
    remove_tiling(model)
    restore_base(model)
    restore_vision_attention(model)
    offloaded = remove_offloading(model)
    if offloaded is None:
        return None
    return f"activation_offloading: {offloaded:.2f} GiB of layer inputs a micro-batch waited in host memory"
