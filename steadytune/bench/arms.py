"""The arms of `bench`, each a function of the bench arguments that returns a JSON-able result.

plain       transformers.Trainer + peft LoRA, batch 8, dynamic padding, full logits: the recipe of seed 003.
peer        the best a tuned LLaMA-Factory user runs: the same recipe with liger-kernel's fused kernels
            (`use_liger_kernel: true`: RMSNorm, RoPE, SwiGLU, fused linear cross-entropy) and the largest batch
            that fits (32, else 16, else 8: the result says which, and why).
llamafactory  LLaMA-Factory's own run_exp, and unsloth: Unsloth + TRL's SFTTrainer; each in a child process under
            a Python of its own, or skipped with the reason (peers.py).
steadytune  the default path of `steadytune train` (kernels.plan_speed decides, as for a run of
            --run-micro-batches micro-batches): packed rows under a token budget, static shapes, CUDA graphs and
            compiled layers where the policy says so, the head only at labelled positions.
loss_check  packed (steadytune's path) against unpacked padded batches: same examples, same steps, per-step loss.
max_len     the longest example (cutoff_len) one steadytune step takes at the token budget, found by trying.

Every arm draws its examples from the same stream (workload.example_order) and is timed by steady.SteadyRate.
`python -m steadytune.bench.arms ARGS.json RESULT.json` runs one arm in a process of its own (what `bench` does
by default), so that no arm inherits another's patched classes (liger patches transformers' modules globally),
allocator state or compiled code.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from steadytune.bench.peers import model_folder_for, run_llamafactory, run_unsloth
from steadytune.bench.steady import SteadyRate
from steadytune.bench.workload import (
    LORA_RANK,
    PEER_BATCHES,
    compute_dtype,
    example_order,
    examples_for,
    lora_model,
    memory_budget_gib,
    parameter_counts,
    peak_memory_gib,
    reset_memory,
    score,
    steady_rule,
    synchronize,
    with_lora,
)
from steadytune.config import ModelArguments, RunConfig
from steadytune.data.collators import PadCollator
from steadytune.data.packing import PackedCollator, group_by_token_budget, static_shape_for, targets_of
from steadytune.hardware.attention_kernels import varlen_static_status
from steadytune.hardware.backend import HardwareInfo, detect
from steadytune.hardware.memory import choose_gradient_checkpointing, held_gib
from steadytune.hardware.policy import AttentionUnavailable
from steadytune.hardware.speed import SpeedUnavailable, plan_speed
from steadytune.model.anatomy import base_model_of
from steadytune.model.attention import (EAGER_ONLY_MODEL_TYPES, attn_implementation_for, choose_packing_for,
                                       linear_attention_reason)
from steadytune.model.linear_attention import graph_blockers as linear_attention_blockers
from steadytune.model.linear_attention import kernel_choice as linear_attention_kernels
from steadytune.model.linear_attention import keep_packed_sequences_apart
from steadytune.model.linear_attention import static_status as linear_attention_static
from steadytune.model.fp8_base import decide_fp8_base, set_fast_accumulation
from steadytune.model.fused_swiglu import decide_fused_swiglu
from steadytune.model.kernels import apply_liger_kernels, compile_layers, skip_lora_input_cast
from steadytune.model.lora_scaling import scale_before_lora_b
from steadytune.model.offload import plan_activation_offloading
from steadytune.model.shared_input import decide_shared_input
from steadytune.model.load import load_model_and_tokenizer
from steadytune.model.lora import attach_adapter
from steadytune.model.moe.anatomy import ROUTED_EXPERTS, is_moe, parameter_kind
from steadytune.model.moe.routing import routing_of
from steadytune.model.quantize import bnb_config, keep_training_layout, quantized_linear_names
from steadytune.model.shapes import SHAPES, attention_for, build_shape, is_moe_shape
from steadytune.training.experts import set_up_experts
from steadytune.training.graphs import GraphRunner
from steadytune.training.loss import causal_lm_loss_sum, count_target_tokens


def meter_for(args, device: torch.device) -> SteadyRate:
    return SteadyRate(**steady_rule(args))


def scored(name: str, meter: SteadyRate, counts: dict, device: torch.device, settings: dict, startup: float) -> dict:
    """`counts`: workload.parameter_counts of the arm's model (MFU's N and N_lora, trainable, active and total)."""
    return score(name, meter.summary(), counts["mfu_parameters"], counts["mfu_lora_parameters"], device, settings,
                 startup, peak_memory_gib(device), counts)


def num_layers(args) -> int | None:
    """bench --num-layers: every arm's model this deep (the shape's widths), or the shape's own depth (None)."""
    return getattr(args, "num_layers", None)


def bench_run_config(args) -> RunConfig:
    """The run config `train` would have for bench's adapters (r 16, alpha 32, lora_target all, no dropout) and
    --moe-grouped-mm: what model/lora.attach_adapter and training/experts.set_up_experts read."""
    cfg = RunConfig()
    cfg.method.lora_rank, cfg.method.lora_alpha = LORA_RANK, 2 * LORA_RANK
    cfg.method.lora_target, cfg.method.lora_dropout = "all", 0.0
    cfg.train.moe_grouped_mm = getattr(args, "moe_grouped_mm", "auto")
    return cfg


def steadytune_experts(args, base, device: torch.device, precision: str):
    """A mixture of experts as `train` sets one up: LoRA through model/lora.attach_adapter (lora_target all: the
    linear layers but the head and the routers, and the routed experts through peft's target_parameters), the experts'
    forward as grouped matmuls with the LoRA path kept apart (install_grouped_experts), then
    training/experts.set_up_experts (the grouped backend for this device, the routers' aux loss and the routing
    statistics the loss gathers). -> (model, settings of what was decided)."""
    cfg = bench_run_config(args)
    model = attach_adapter(base, cfg)
    set_up_experts(cfg, model, device, precision)
    keys = ("lora_target", "trainable_by_kind", "moe_grouped_mm", "moe_aux_loss_coef", "routed_experts")
    return model, {key: cfg.decisions[key] for key in keys if key in cfg.decisions}


def quantized(args) -> bool:
    return getattr(args, "quantization_bit", None) == 4


def saved_shape(args, device: torch.device) -> Path:
    """The shape's model folder, which a 4-bit base is quantised from as it loads: in the folder `bench` keeps for the
    call (the peers share it), or, outside a bench call (profile_bench.py), in one of this process's own, removed
    when it exits."""
    work = getattr(args, "model_folders", None)
    if not work:
        work = tempfile.mkdtemp(prefix="steadytune-bench-model-")
        atexit.register(shutil.rmtree, work, True)
    return model_folder_for(args, device, Path(work))


def trainer_4bit_model(args, device: torch.device, peft_recipe: bool):
    """A Trainer arm's QLoRA model: from_pretrained with train's 4-bit config (nf4, double quantisation: LLaMA-Factory's
    defaults for quantization_bit: 4), then LoRA. peft_recipe: also
    peft's prepare_model_for_kbit_training, as the peft docs' QLoRA recipe does (the plain arm): non-quantised
    weights upcast to fp32, gradient checkpointing on."""
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    four_bit = bnb_config(ModelArguments(quantization_bit=4), compute_dtype(device))
    base = AutoModelForCausalLM.from_pretrained(saved_shape(args, device), dtype=compute_dtype(device),
                                                attn_implementation=attention_for(args.shape, "sdpa"),
                                                quantization_config=four_bit, device_map={"": device})
    if peft_recipe:
        base = prepare_model_for_kbit_training(base)
    return with_lora(base)


def steadytune_4bit_base(args, device: torch.device, attn_implementation: str):
    """steadytune's QLoRA base as `train` loads one with quantization_bit: 4 (its loader, bitsandbytes' training
    layout kept); the caller adds LoRA."""
    model_args = ModelArguments(model_name_or_path=str(saved_shape(args, device)), quantization_bit=4)
    model, _ = load_model_and_tokenizer(model_args, torch_dtype=compute_dtype(device),
                                        attn_implementation=attention_for(args.shape, attn_implementation),
                                        device=device, compute_dtype=compute_dtype(device))
    keep_training_layout(model)
    return model


def four_bit_base(model) -> str:
    """What a QLoRA arm's base is, with the count of linear layers bitsandbytes holds (so a load that quantised
    nothing shows)."""
    return f"4-bit: bitsandbytes nf4, double quantisation, {len(quantized_linear_names(model))} linear layers"


def _is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


# --- plain and peer: transformers.Trainer ------------------------------------------------------------------

def run_plain(args, device: torch.device) -> dict:
    """The plain recipe; on a mixture of experts with gradient checkpointing where its memory needs it
    (plain_checkpointing), and turned on if a step without it runs out of memory anyway."""
    checkpointing, why = plain_checkpointing(args.shape, num_layers(args), memory_budget_gib(device),
                                             compute_dtype(device))
    result = None
    try:
        result = run_trainer_arm("plain", args, device, args.plain_batch, liger=False, pad_multiple=None,
                                 checkpointing=checkpointing)
    except Exception as e:  # noqa: BLE001 - only running out of memory is a reason to try again
        if checkpointing or not _is_out_of_memory(e) or not is_moe_shape(args.shape):
            raise
    if result is None:   # out of the except block: the failed attempt's frames (and its model) are gone
        reset_memory(device)
        checkpointing, why = True, "on: a step without it ran out of memory"
        result = run_trainer_arm("plain", args, device, args.plain_batch, liger=False, pad_multiple=None,
                                 checkpointing=True)
    if is_moe_shape(args.shape):
        result["settings"]["gradient_checkpointing"] = {"value": checkpointing, "reason": why}
    return result


def plain_checkpointing(shape: str, layers: int | None, budget: float | None, dtype: torch.dtype
                        ) -> tuple[bool, str]:
    """Whether the plain recipe on a mixture of experts turns on the Trainer's gradient checkpointing, as a careful
    user would where the memory needs it: peft's parametrized expert LoRA builds W + scaling B A for every expert of
    a layer each step, and autograd keeps that copy (the size of the layer's routed experts) until backward, so the
    weights are held about twice over. On when the weights, that copy and the adapters' fp32 weights, gradients and
    AdamW moments (16 bytes each) would pass 85% of the GPU's memory. Dense shapes: off, as the recipe always was."""
    if not is_moe_shape(shape):
        return False, "off (the plain recipe)"
    eager_only = EAGER_ONLY_MODEL_TYPES.get(SHAPES[shape]["model_type"])
    if eager_only:   # transformers' gpt-oss fine-tuning recipe (its SFTConfig) turns checkpointing on
        return True, (f"on: {eager_only}, which keeps every layer's [heads, length, length] probabilities for "
                      "backward; transformers' own gpt-oss fine-tuning recipe turns gradient checkpointing on")
    if budget is None:
        return False, "off: no GPU memory to fit"
    with torch.device("meta"):   # the adapters too: peft would draw their random values on the CPU (seconds)
        meta = with_lora(build_shape(shape, dtype=dtype, device="meta", num_layers=layers))
    counts = parameter_counts(meta)
    bytes_each = torch.empty((), dtype=dtype).element_size()
    routed = sum(p.numel() for name, p in meta.named_parameters()
                 if not p.requires_grad and parameter_kind(name) == ROUTED_EXPERTS) * bytes_each / 2**30
    weights = counts["total_parameters"] * bytes_each / 2**30
    adapters = counts["trainable_parameters"] * 16 / 2**30
    need = weights + routed + adapters
    verdict = need > 0.85 * budget
    return verdict, (f"{'on' if verdict else 'off'}: weights {weights:.1f} GiB + the copy of the routed experts peft's "
                     f"parametrization keeps for backward {routed:.1f} GiB + adapters with AdamW {adapters:.1f} GiB = "
                     f"{need:.1f} GiB {'>' if verdict else '<='} 85% of the {budget:.0f} GiB GPU")


def run_peer(args, device: torch.device) -> dict:
    """The largest batch of PEER_BATCHES that fits, with liger-kernel where it is installed."""
    liger = importlib.util.find_spec("liger_kernel") is not None
    tried = []
    for batch in PEER_BATCHES:
        try:
            result = run_trainer_arm("peer", args, device, batch, liger=liger, pad_multiple=8)
        except Exception as e:  # noqa: BLE001 - only running out of memory is a reason to try a smaller batch
            if not _is_out_of_memory(e) or batch == PEER_BATCHES[-1]:
                raise
            tried.append(f"batch {batch}: out of memory")
            del e
            reset_memory(device)
            continue
        result["settings"]["batch_fallback"] = tried or None
        if not liger:
            result["settings"]["liger_kernel"] = "not installed here: this arm ran without it (pip install liger-kernel)"
        return result
    raise AssertionError("unreachable")


def run_trainer_arm(name: str, args, device: torch.device, batch: int, liger: bool, pad_multiple: int | None,
                    checkpointing: bool = False) -> dict:
    from torch.utils.data import SequentialSampler
    from transformers import Trainer, TrainerCallback, TrainingArguments


    started = time.perf_counter()
    reset_memory(device)
    examples = examples_for(args)
    meter = meter_for(args, device)
    warmup = args.warmup
    cap = warmup + (meter.fixed_steps or meter.max_steps)
    ordered = [examples[i] for i in example_order(len(examples), cap * batch)]
    if quantized(args):  # the plain arm follows the peft docs' QLoRA recipe; the peer arm, as LF would, does not
        model = trainer_4bit_model(args, device, peft_recipe=name == "plain")
    else:
        model = lora_model(args.shape, device, num_layers=num_layers(args))
    counts = parameter_counts(model)
    collate = PadCollator(pad_token_id=0, pad_to_multiple_of=pad_multiple)
    batch_tokens: list[int] = []

    def counting_collator(rows):
        batch_tokens.append(sum(len(e["input_ids"]) for e in rows))
        return collate(rows)

    marks = {}
    logged: dict = {}

    class Steady(TrainerCallback):
        def on_step_begin(self, targs, state, control, **kw):
            if state.global_step == warmup and "start" not in marks:
                meter.start(lambda: synchronize(device))
                marks["start"] = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            k = state.global_step  # steps done; batches are collated in step order (the loader may run one ahead)
            if k > warmup and meter.step(batch_tokens[k - 1], lambda: synchronize(device)):
                control.should_training_stop = True
                control.should_log = True  # the loss of the last steps, as the peer arms' children log it

        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                logged.update(loss=float(logs["loss"]), loss_step=state.global_step)

    class InOrder(Trainer):
        def _get_train_sampler(self, *a, **kw):  # the shared example order, not a reshuffle of its own
            return SequentialSampler(self.train_dataset)

    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, max_steps=cap, learning_rate=1e-4,
            bf16=device.type == "cuda", use_cpu=device.type == "cpu", logging_steps=args.window, save_strategy="no",
            report_to=[], dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True, seed=0,
            max_grad_norm=1.0, use_liger_kernel=liger, gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
            # The Trainer's default filter drops a non-finite step loss from the logged mean, so a run whose every
            # step is NaN logs 0.0 (the liger peer on the Gemma shape, 2026-12-02): log it as it is instead.
            logging_nan_inf_filter=False)
        trainer = InOrder(model=model, args=targs, train_dataset=ordered, data_collator=counting_collator,
                          callbacks=[Steady()])
        trainer.train()
    settings = {"batch": batch, "padding": "dynamic" + (f", to a multiple of {pad_multiple}" if pad_multiple else ""),
                "attention": "sdpa", "loss": "liger fused linear cross-entropy" if liger else "HF full logits",
                "liger_kernel": liger, "trainer": "transformers.Trainer"}
    if is_moe(model):
        settings["lora"] = moe_plain_lora_note(model)
    if quantized(args):
        settings["base"] = four_bit_base(model) + (
            " + peft's prepare_model_for_kbit_training (fp32 non-quantised weights, gradient checkpointing)"
            if name == "plain" else "")
    result = scored(name, meter, counts, device, settings, marks.get("start", started) - started)
    if logged:
        result.update(logged, loss_tokens=sum(batch_tokens[:logged["loss_step"]]))
    del trainer, model
    return result


def moe_plain_lora_note(model) -> dict:
    """What the Trainer arms adapt on a mixture of experts (workload.moe_lora_config) and how it runs."""
    config = model.peft_config["default"]
    base = base_model_of(model)
    return {"target_modules": sorted(config.target_modules), "target_parameters": sorted(config.target_parameters),
            "experts_implementation": getattr(base.config, "_experts_implementation", None),
            "reason": "the plain transformers 5 + peft recipe for a mixture of experts: all-linear's layers but the "
                      "routers, and the fused routed experts through peft's target_parameters (its parametrized "
                      "forward: W + scaling B A for every expert each step), under transformers' default experts "
                      "implementation"}


def last_window_loss(losses: list, window: int, step_tokens: list[int]) -> dict:
    """The mean per-token loss of the last `window` steps, as a Trainer logs it every `window` steps; -> {loss,
    loss_step, loss_tokens (real tokens trained up to then)}, or {} when no step ran. Read back once, after timing."""
    if not losses:
        return {}
    last = torch.stack([x.float() for x in losses[-window:]]).mean()
    return {"loss": float(last), "loss_step": len(losses), "loss_tokens": sum(step_tokens[:len(losses)])}


# --- steadytune's default path ------------------------------------------------------------------------------

def _asked(value: str) -> bool | None:
    return {"auto": None, "on": True, "off": False}[value]


def _cpu_info():
    return HardwareInfo(backend="cpu", torch_version=torch.__version__)


def steadytune_setup(args, device: torch.device, groups: list[list[int]], examples: list[dict], packing: bool = True,
                     allow_compile: bool = True):
    """Model, collator, speed plan and settings of steadytune's default path on this device, for these micro-batches
    (the static shape is made for them). The same policy calls `train` makes (kernels.plan_speed,
    choose_gradient_checkpointing)."""

    info = detect() if device.type == "cuda" else _cpu_info()
    settings: dict = {}
    offloading = _asked(getattr(args, "activation_offloading", "auto"))
    attention, kernel, why = "sdpa", None, "unpacked reference"
    eager_only = EAGER_ONLY_MODEL_TYPES.get(SHAPES[args.shape]["model_type"])
    if packing and eager_only:   # gpt-oss: as train's plan_packing, eager attention over a block-diagonal mask
        if args.packing_attention in ("varlen", "flex"):
            raise SystemExit(f"--packing-attention {args.packing_attention}, but {eager_only}; use auto or sdpa")
        why = f"{eager_only}: eager attention, rows kept apart by a block-diagonal mask"
    varlen_kernel = None
    recurrent = linear_attention_reason("", SHAPES[args.shape])   # Qwen3.5 / Qwen3-Next: one varlen row, as train
    if packing and not eager_only:
        try:
            attention, kernel, varlen_kernel, why = choose_packing_for(info, args.packing_attention, recurrent)
        except AttentionUnavailable as e:
            raise SystemExit(f"--packing-attention {e}") from None
    settings["packing_attention"] = {"value": attention, "kernel": kernel, "reason": why}
    implementation = attn_implementation_for(attention, varlen_kernel)
    precision = "bf16" if device.type == "cuda" else "fp32"
    if quantized(args):
        model = steadytune_4bit_base(args, device, implementation)
        base = four_bit_base(model) + " (train's quantization_bit: 4)"
    else:
        model = build_shape(args.shape, dtype=compute_dtype(device), device=device,
                            attn_implementation=implementation, num_layers=num_layers(args))
        base = precision
    keep_packed_sequences_apart(model)   # gated DeltaNet layers: restart per example (model/linear_attention.py)
    choice = linear_attention_kernels(model.config, device.type)
    if choice:
        settings["linear_attention"] = {"value": choice[0], "reason": choice[1]}
    if is_moe(model):
        model, settings["experts"] = steadytune_experts(args, model, device, precision)
    else:
        model = with_lora(model)
    if device.type == "cuda" and args.lora_input_cast == "skip":
        settings["lora_input_cast"] = {"value": "off", "reason": skip_lora_input_cast(model)[1]}
    if getattr(args, "lora_scaling", "first") == "first":   # as train does
        settings["lora_scaling"] = {"value": "before lora_B", "reason": scale_before_lora_b(model)[1]}
    static_ok = (varlen_static_status(kernel) if kernel != "segment_sdpa" else
                 (False, "no varlen flash kernel here: full attention runs SDPA per example")
                 ) if attention == "varlen" else (True, "")
    static_ok = linear_attention_static(model) or static_ok   # as train's speed plan
    lengths = [len(e["input_ids"]) for e in examples]
    shape = (static_shape_for(groups, lengths, [targets_of(e) for e in examples], attention, args.cutoff_len)
             if packing else None)
    plan = plan_speed(info.backend, attention if packing else None, args.run_micro_batches, 1, precision,
                      compile_asked=_asked(args.compile) if allow_compile else False,
                      graphs_asked=_asked(args.cuda_graphs), liger_asked=_asked(args.liger), static_ok=static_ok,
                      tuning_asked=_asked(getattr(args, "kernel_tuning", "auto")) if allow_compile else False,
                      recompute_asked=_asked(getattr(args, "recompute_pointwise", "auto")) if allow_compile else False,
                      shared_asked=_asked(getattr(args, "shared_input", "auto")),
                      static_fill=shape.fill if shape else None, blockers=linear_attention_blockers(model))
    if plan.static_shapes:
        plan.reasons["static_shapes"] += f" ({shape.describe()})"
    else:
        shape = None
    if plan.liger:
        plan.liger, why = apply_liger_kernels(model)
        plan.reasons["use_liger_kernel"] = why
    if plan.compile:
        _, why = compile_layers(model, static_shapes=plan.static_shapes, tune=plan.kernel_tuning,
                                recompute_pointwise=plan.recompute_pointwise)
        plan.reasons["torch_compile"] += f" ({why})"
    for key, value in (("static_shapes", plan.static_shapes), ("torch_compile", plan.compile),
                       ("kernel_tuning", plan.kernel_tuning), ("recompute_pointwise", plan.recompute_pointwise),
                       ("cuda_graphs", plan.cuda_graphs),
                       ("use_liger_kernel", plan.liger)):
        settings[key] = {"value": value, "reason": plan.reasons[key]}
    tokens = shape.tokens if shape is not None else max(sum(lengths[i] for i in g) for g in groups)
    weights_gib = held_gib([*model.parameters(), *model.buffers()])  # as train weighs them (fp8 copies too)
    # fp8 after the plan (the default needs compiled layers) and before the first forward, when the layers compile
    settings["fp8_base"] = bench_fp8_base(args, model, device, precision, plan, tokens, weights_gib)
    if getattr(args, "fp8_accumulation", "fast") == "exact" and set_fast_accumulation(model, False):
        settings["fp8_base"]["reason"] += "; exact accumulation (--fp8-accumulation exact)"
    # after the fp8 base, whose copies the groups merge (as train does)
    plan.shared_input, why = decide_shared_input(model, plan.shared_input, plan.reasons["shared_input_projections"])
    settings["shared_input_projections"] = {"value": plan.shared_input, "reason": why}
    on, why = decide_fused_swiglu(model, _asked(getattr(args, "fused_swiglu", "auto")), device, plan.compile)
    settings["fused_swiglu"] = {"value": on, "reason": why}
    weights_gib = held_gib([*model.parameters(), *model.buffers()])
    use_gc, gc_why = choose_gradient_checkpointing(model.get_base_model().config, tokens, memory_budget_gib(device),
                                                   True if offloading else _asked(args.gradient_checkpointing),
                                                   compiled=plan.compile, state_gib=weights_gib,
                                                   recompute_pointwise=plan.recompute_pointwise)
    if use_gc:
        enable_checkpointing(model, plan.cuda_graphs)
    settings["gradient_checkpointing"] = {"value": use_gc, "reason": gc_why}
    try:   # as train decides it: on by default only where checkpointing alone would not fit
        offload, why = plan_activation_offloading(model, plan, use_gc, tokens, memory_budget_gib(device), weights_gib,
                                                  offloading, None)
    except SpeedUnavailable as e:
        raise SystemExit(f"--activation-offloading on, but {e}") from None
    settings["activation_offloading"] = {"value": offload is not None, "reason": why}
    if offload is not None:
        settings["activation_offloading"]["hooks"] = offload
    settings["cuda_graphs"] = {"value": plan.cuda_graphs, "reason": plan.reasons["cuda_graphs"]}
    # a mixture of experts' routing statistics leave padding out: packed rows say where it is (segment ids)
    collate = (PackedCollator(pad_token_id=0, row_len=args.cutoff_len, attention=attention,
                              segment_ids=routing_of(model) is not None, static=shape) if packing
               else PadCollator(pad_token_id=0))
    settings.update(max_tokens_per_step=args.max_tokens, packing=packing, static_shape=shape.__dict__ if shape else None,
                    loss="head at labelled positions, chunked fused cross-entropy", adapters="fp32",
                    base=base)
    return model, collate, plan, settings


def bench_fp8_base(args, model, device: torch.device, precision: str, plan, tokens: int, weights_gib: float) -> dict:
    """--fp8-base as train's fp8_base (model/fp8_base.decide_fp8_base): on / off as asked, auto as train's default."""
    on, why = decide_fp8_base(model, _asked(getattr(args, "fp8_base", "auto")), device, precision, plan.compile,
                              tokens, memory_budget_gib(device), weights_gib, _asked(args.gradient_checkpointing))
    return {"value": "on" if on else "off", "reason": why}


def enable_checkpointing(model, graphs: bool) -> None:
    kwargs = {"use_reentrant": False}
    if graphs:
        kwargs["preserve_rng_state"] = False  # a graph cannot record the RNG state's save and restore (no dropout)
    model.get_base_model().gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.get_base_model().enable_input_require_grads()


def train_steps(model, collate, examples: list[dict], groups: list[list[int]], device: torch.device, warmup: int,
                meter: SteadyRate | None, graphs: bool, settings: dict | None = None,
                read_loss: bool = False) -> tuple[list, dict]:
    """One optimizer step per group until `meter` says stop (or every group, without a meter);
    -> (per-token loss of each step as device tensors, timing marks).

    The loss is not read back during the loop unless `read_loss` (as train's loop does, for its guard): reading it
    (.item()) makes the CPU wait for the GPU every step and leaves the GPU idle while the next step is launched."""

    cuda = device.type == "cuda"
    # With graphs the runner pins each batch itself, in this thread: a pinning thread would allocate host memory
    # while the graph is being recorded.
    loader = torch.utils.data.DataLoader(examples, batch_sampler=groups, collate_fn=collate,
                                         num_workers=2 if cuda else 0, pin_memory=cuda and not graphs)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=cuda)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)
    events: list[dict] = []

    def on_out_of_memory() -> str | None:
        if settings is None or settings["gradient_checkpointing"]["value"]:
            return None
        enable_checkpointing(model, graphs=True)
        settings["gradient_checkpointing"] = {"value": True, "reason": "on: recording the CUDA graph ran out of memory"}
        return "gradient checkpointing turned on"

    runner = (GraphRunner(lambda b: causal_lm_loss_sum(model, b), trainable, device,
                          torch.bfloat16 if cuda else None, report=events.append, on_out_of_memory=on_out_of_memory)
              if graphs else None)
    model.train()
    losses, marks = [], {}
    for step, cpu_batch in enumerate(loader):
        if meter is not None and step == warmup:
            meter.start(lambda: synchronize(device))
            marks["start"] = time.perf_counter()
        n = cpu_batch["n_targets"] if "n_targets" in cpu_batch else count_target_tokens(cpu_batch)
        if runner is not None and runner.takes(cpu_batch):
            loss_sum = runner(cpu_batch, 1.0 / max(n, 1))
        else:
            batch = {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                     for k, v in cpu_batch.items()}
            with autocast:
                loss_sum, _ = causal_lm_loss_sum(model, batch)
            (loss_sum / max(n, 1)).backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss_sum.detach() / max(n, 1))
        if read_loss:
            float(losses[-1])
        if meter is not None and step >= warmup:
            tokens = sum(len(examples[i]["input_ids"]) for i in groups[step])
            if meter.step(tokens, lambda: synchronize(device)):
                break
    synchronize(device)
    marks["graph_events"] = events
    if runner is not None:
        marks["eager_micro_batches"] = runner.eager_batches
        runner.release()
    return losses, marks


def step_groups(examples: list[dict], max_tokens: int, count: int) -> list[list[int]]:
    """`count` steps of at most `max_tokens` real tokens, cut from the shared example order."""
    lengths = [len(e["input_ids"]) for e in examples]
    mean = sum(lengths) / len(lengths)
    order = example_order(len(examples), int(count * max_tokens / mean * 1.2) + len(examples))
    return group_by_token_budget(lengths, order, max_tokens)[:count]


def run_steadytune(args, device: torch.device) -> dict:
    started = time.perf_counter()
    reset_memory(device)
    examples = examples_for(args)
    meter = meter_for(args, device)
    groups = step_groups(examples, args.max_tokens, args.warmup + (meter.fixed_steps or meter.max_steps))
    model, collate, plan, settings = steadytune_setup(args, device, groups, examples)
    counts = parameter_counts(model)
    read_loss = getattr(args, "read_loss_each_step", False)
    losses, marks = train_steps(model, collate, examples, groups, device, args.warmup, meter, plan.cuda_graphs,
                                settings, read_loss=read_loss)
    if read_loss:
        settings["read_loss_each_step"] = {"value": True, "reason": "each step's loss read back as train's loop does"}
    offloading = settings.get("activation_offloading")
    hooks = offloading.pop("hooks", None) if offloading else None
    if hooks is not None:   # what one micro-batch moved (a run that moves nothing offloads in name only)
        offloading["gib_per_micro_batch"] = round(hooks.bytes_offloaded / 2**30, 3)
        print(f"  activation_offloading: {offloading['gib_per_micro_batch']} GiB a micro-batch to host memory")
    settings["cuda_graph_events"] = marks["graph_events"]
    settings["eager_micro_batches"] = marks.get("eager_micro_batches")
    result = scored("steadytune", meter, counts, device, settings, marks.get("start", started) - started)
    result.update(last_window_loss(losses, args.window,
                                   [sum(len(examples[i]["input_ids"]) for i in group) for group in groups]))
    del model
    return result


def run_loss_check(args, device: torch.device) -> dict:
    """Same examples, same order, same steps: packed (steadytune's path, compile left out) and padded training
    must give the same per-token loss."""
    examples = examples_for(args)
    groups = step_groups(examples, args.max_tokens, args.check_loss)
    curves, settings = {}, {}
    # The padded arm pads every example of a step to the longest one (several times the real tokens): both arms
    # recompute activations in backward, which changes no value and keeps the padded arm inside memory.
    check_args = argparse.Namespace(**{**vars(args), "gradient_checkpointing": "on"})
    for packing in (True, False):
        reset_memory(device)
        model, collate, plan, arm_settings = steadytune_setup(check_args, device, groups, examples, packing=packing,
                                                              allow_compile=False)
        losses, marks = train_steps(model, collate, examples, groups, device, 0, None,
                                    plan.cuda_graphs and packing, arm_settings)
        name = "packed" if packing else "unpacked"
        curves[name] = [float(x) for x in torch.stack(losses).cpu()]
        settings[name] = {k: arm_settings[k]["value"] for k in ("static_shapes", "cuda_graphs", "gradient_checkpointing")}
        settings[name]["graph_events"] = marks["graph_events"]
        del model
    rel = [abs(a - b) / abs(b) for a, b in zip(curves["packed"], curves["unpacked"])]
    return {"name": "loss_check", "steps": args.check_loss, "max_relative_difference": max(rel), **curves,
            "settings": settings}


# --- the longest cutoff_len at a token budget ------------------------------------------------------------------

def run_max_len(args, device: torch.device) -> dict:
    """Try one optimizer step on a single example of L tokens (every position after the first labelled: the loss's
    worst case), L doubling from the token budget up to --probe-max, then halving the gap between the longest that
    fitted and the shortest that did not down to --probe-step. Gradient checkpointing as the policy decides for a
    micro-batch of max(L, budget) tokens; eager layers (a new length would compile again; compiled layers keep
    less for backward, so this is a lower bound)."""

    started = time.perf_counter()
    # Eager layers without liger: the default long run compiles its layers instead (and then skips liger), and
    # compiled layers keep less for backward, so what fits here fits there.
    probe_args = argparse.Namespace(**{**vars(args), "compile": "off", "cuda_graphs": "off", "kernel_tuning": "off",
                                       "recompute_pointwise": "off", "liger": "off", "cutoff_len": args.probe_max})
    dummy = [{"input_ids": [1, 2], "labels": [1, 2]}]
    model, _, plan, settings = steadytune_setup(probe_args, device, [[0]], dummy)
    attention = settings["packing_attention"]["value"]
    config = model.get_base_model().config
    weights_gib = held_gib([*model.parameters(), *model.buffers()])  # as train weighs them (fp8 copies too)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=device.type == "cuda")
    vocab = SHAPES[args.shape]["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    trials = []

    def fits(length: int) -> bool:
        tokens = max(length, args.max_tokens)
        use_gc, why = choose_gradient_checkpointing(config, tokens, memory_budget_gib(device),
                                                    _asked(args.gradient_checkpointing), state_gib=weights_gib)
        base = model.get_base_model()
        if use_gc:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.enable_input_require_grads()
        else:
            base.gradient_checkpointing_disable()
        ids = torch.randint(100, vocab - 1, (length,), generator=gen).tolist()
        batch = PackedCollator(0, row_len=length, attention=attention)([{"input_ids": ids, "labels": ids}])
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        reset_memory(device)
        t0 = time.perf_counter()
        ok = True
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss_sum, n = causal_lm_loss_sum(model, batch)
            (loss_sum / n).backward()
            optimizer.step()
            synchronize(device)
        except Exception as e:  # noqa: BLE001 - out of memory is the answer we are looking for
            if not _is_out_of_memory(e):
                raise
            ok = False
        optimizer.zero_grad(set_to_none=True)
        batch = loss_sum = None
        trials.append({"cutoff_len": length, "fits": ok, "gradient_checkpointing": use_gc,
                       "peak_memory_gib": round(peak_memory_gib(device) or 0.0, 2),
                       "seconds": round(time.perf_counter() - t0, 2)})
        print(f"  max_len probe: {length:>7,} tokens {'fits' if ok else 'out of memory'} "
              f"(checkpointing {'on' if use_gc else 'off'}, peak {trials[-1]['peak_memory_gib']} GiB, "
              f"{trials[-1]['seconds']} s)", flush=True)
        reset_memory(device)
        return ok

    deadline = started + args.probe_seconds
    lo, hi = search_longest(fits, args.max_tokens, args.probe_max, args.probe_step,
                            lambda: time.perf_counter() >= deadline)
    return {"name": "max_len", "max_cutoff_len": lo or None, "first_out_of_memory": hi, "budget_tokens": args.max_tokens,
            "probe_max": args.probe_max, "stopped_by_time": time.perf_counter() >= deadline, "trials": trials,
            "settings": {k: settings[k] for k in ("packing_attention", "use_liger_kernel")}}


def search_longest(fits, start: int, cap: int, step: int, out_of_time=lambda: False) -> tuple[int, int | None]:
    """-> (longest length that fitted or 0, shortest that did not or None). Doubling from `start` (and `cap` itself
    last), then halving the gap between the two down to `step`, until `out_of_time()`."""
    ladder, length = [], start
    while length < cap:
        ladder.append(length)
        length *= 2
    ladder.append(cap)
    lo, hi = 0, None
    for length in ladder:
        if out_of_time():
            return lo, hi
        if not fits(length):
            hi = length
            break
        lo = length
    while hi is not None and hi - lo > step and not out_of_time():
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


RUNNERS = {"plain": run_plain, "peer": run_peer, "llamafactory": run_llamafactory, "unsloth": run_unsloth,
           "steadytune": run_steadytune, "loss_check": run_loss_check, "max_len": run_max_len}


def run_arm(name: str, args, device: torch.device) -> dict:
    return RUNNERS[name](args, device)


def main(argv: list[str]) -> int:
    """python -m steadytune.bench.arms ARGS.json RESULT.json: one arm in this process, its result as JSON."""
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    args = argparse.Namespace(**spec["args"])
    device = torch.device(spec["device"])
    result = run_arm(spec["arm"], args, device)
    Path(argv[1]).write_text(json.dumps(result, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
