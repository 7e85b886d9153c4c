"""What `train` would choose on a machine: dtype, attention, packing, the kernel that keeps packed examples
apart, and gradient checkpointing for the GPU's memory. Every answer comes from the policy function `train`
itself calls (hardware.choose_precision, choose_attention, choose_packing_attention, packing.decide_packing,
kernels.choose_gradient_checkpointing), applied to a `HardwareInfo` of that machine, so `doctor --from` reports
the saved machine's choices, not this one's.

Without a config, the defaults of a config (bf16: auto, flash_attn: auto, packing unset) apply and gradient
checkpointing is shown for a few reference model shapes; with `--config`, its values and (where the model is a
local folder or a known shape) its model.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Optional

from steadytune.config import RunConfig
from steadytune.doctor.findings import Finding
from steadytune.errors import UserError
from steadytune.hardware import moe_shape as moe
from steadytune.hardware.long_context import (
    DEFAULT_LEVER_TILE,
    describe_levers,
    estimate_for,
    lora_run_state_gib,
    room_gib,
)
from steadytune.hardware.memory import (
    activation_gib,
    estimate_parameters,
    checkpointed_activation_gib,
    choose_gradient_checkpointing,
    dequantised_experts_gib,
    lora_parameters,
    max_tokens_without_checkpointing,
    run_memory_gib,
    state_gib_of,
    weight_gib,
)
from steadytune.hardware.quantization import (
    GATE_SOURCE,
    bitsandbytes_status,
    quantised_bytes_per_parameter,
    quantized_memory,
    speed_blockers,
)
from steadytune.hardware.policy import (AttentionUnavailable, choose_attention, choose_packing_attention,
                                        choose_precision)
from steadytune.hardware.rccl import rocm_tuple
from steadytune.hardware.rocm_path import rocm_path
from steadytune.hardware.speed import COMPILE_MIN_MICRO_BATCHES, KERNEL_TUNING_MIN_MICRO_BATCHES
from steadytune.hardware.unified_memory import system_memory_gib
from steadytune.model.kernel_builds import feature_verdict, record_target   # the record is JSON: no torch, no Triton
from steadytune.model.kernel_catalogue import FEATURES

if TYPE_CHECKING:
    from steadytune.config import RunConfig
    from steadytune.hardware.backend import HardwareInfo

# Shapes from model/shapes.py shown when no config names a model: the demo's model and two common LoRA bases.
REFERENCE_SHAPES = ("gemma3-270m", "qwen2.5-1.5b", "qwen2.5-3b")
NOT_RUN_HERE = "not run: these are saved outputs; train runs each varlen kernel once at start and uses it only if it matches SDPA"


def _default_config() -> "RunConfig":
    return RunConfig()


def precision_and_attention(info: "HardwareInfo", cfg: "RunConfig", check: str) -> list[Finding]:
    t = cfg.train
    dtype, why = choose_precision(info, t.bf16, t.fp16)
    findings = [Finding.info(check, f"train would use {dtype} (bf16: {t.bf16}, fp16: {t.fp16})", why)]
    if cfg.model.flash_attn == "fa2":
        findings.append(Finding.info(check, "flash_attn: fa2 is asked for",
                                     "train checks at start that flash-attn imports and runs there, and stops if not"))
    else:
        impl, why = choose_attention(info, cfg.model.flash_attn)
        findings.append(Finding.info(check, f"train would use attention {impl}", why))
    return findings


def packing_findings(info: "HardwareInfo", cfg: "RunConfig", check: str, offline: bool) -> list[Finding]:
    # lazy: model.attention loads torch; doctor runs where torch does not import
    from steadytune.model.attention import choose_packing_for, decide_packing, linear_attention_reason
    cfg = copy.deepcopy(cfg)
    packs = decide_packing(cfg, class_weighted_loss=False, info=info)
    findings = [Finding.info(check, f"train would {'pack' if packs else 'not pack'} micro-batches",
                             cfg.decisions["packing"]["reason"])]
    if packs:
        status = (lambda: (None, NOT_RUN_HERE)) if offline else None
        recurrent = linear_attention_reason(cfg.model.model_name_or_path)   # Qwen3.5 / Qwen3-Next: one varlen row
        try:
            attention, kernel, _, why = choose_packing_for(info, cfg.data.packing_attention, recurrent, status)
        except AttentionUnavailable as e:
            return findings + [Finding.error(check, f"packing_attention: {e}", fix="set packing_attention: auto")]
        name = f"{attention} ({kernel})" if kernel else attention
        if offline and info.backend in ("cuda", "rocm"):
            findings.append(Finding.info(check, "packed rows keep examples apart with a varlen flash kernel where one runs "
                                                f"there, else {name}", why))
        else:
            findings.append(Finding.info(check, f"packed rows keep examples apart with {name}", why))
    return findings


def _shape_config(name: str):
    from transformers import AutoConfig

    # lazy: model.shapes loads torch; doctor runs where torch does not import
    from steadytune.model.shapes import SHAPES
    spec = dict(SHAPES[name])
    return AutoConfig.for_model(spec.pop("model_type"), **spec)


def model_config_for(cfg: "RunConfig"):
    """(transformers config, label) of the config's model without loading weights: a local folder's
    config.json, or a known shape whose name appears in the model name (Qwen/Qwen2.5-1.5B-Instruct ->
    qwen2.5-1.5b). None when neither applies (a hub id not downloaded here)."""
    from pathlib import Path

    # lazy: model.shapes loads torch; doctor runs where torch does not import
    from steadytune.model.shapes import SHAPES
    name = cfg.model.model_name_or_path or ""
    if name and (Path(name) / "config.json").is_file():
        from steadytune.model.config_values import read_config   # lazy: transformers
        config = read_config(name, {"local_files_only": True})   # a field train refuses: the same line, raised
        if config is None:
            return None
        text = config.get_text_config()
        if text is not config:   # a vision-language model: its language model's sizes (the vision tower not counted)
            return text, f"{name} (its language model; the vision tower and projector are not counted)"
        return config, name
    key = name.lower().replace("_", "-")
    for shape in sorted(SHAPES, key=len, reverse=True):
        if shape != "tiny" and shape in key:
            return _shape_config(shape), f"{name} ({shape} shape)"
    return None


def quantised_weight_gib(config, model_args) -> float:
    """GiB of the frozen base once bitsandbytes quantises its linear layers as `model_args` asks (quantization_bit,
    double_quantization; a mixture of experts' routed experts too at 4 bits); embeddings, head and norms stay in
    bf16."""
    return weight_gib(config, quantised_bytes_per_parameter(model_args.quantization_bit,
                                                            model_args.double_quantization))


def lora_state_gib(config, rank: int) -> float:
    """LoRA with lora_target: all, its gradients and AdamW's two moments (16 bytes a parameter): what train's speed
    plan adds to the weights it holds (every expert's pair in a mixture of experts: GiB, not MiB)."""
    return lora_parameters(config, rank) * 16 / 2**30


def held_state_gib(config, cfg: "RunConfig") -> float:
    """What train weighs beside the activations when it decides checkpointing (training/speed_plan.py): the frozen
    base (quantised as the config asks), and for a mixture of experts LoRA's state and a 4-bit layer dequantised."""
    m = cfg.model
    weights = quantised_weight_gib(config, m) if m.quantization_bit is not None else state_gib_of(config)
    if moe.moe_shape(config) is None:
        return weights
    unpacked = dequantised_experts_gib(config) if m.quantization_bit == 4 else 0.0
    return weights + lora_state_gib(config, cfg.method.lora_rank) + unpacked


def checkpointing_findings(info: "HardwareInfo", cfg: Optional["RunConfig"], check: str) -> list[Finding]:
    gpu = info.primary
    if gpu is None:
        return []
    budget = gpu.budget_gib
    if not budget:   # a saved output that does not show the memory (collect_env, a cut table)
        return [Finding.info(check, f"GPU {gpu.index}'s memory is unknown: gradient checkpointing is decided on that "
                                    "machine at start", "the saved outputs do not show the GPU's memory",
                             fix="save rocminfo or amd-smi too, for train's memory plan")]
    where = f"{budget:g} GiB" + (f" ({gpu.memory_note})" if gpu.memory_note else "")
    if cfg is not None and cfg.train.gradient_checkpointing is not None:
        use, why = choose_gradient_checkpointing(None, 0, budget, cfg.train.gradient_checkpointing)
        return [Finding.info(check, f"gradient checkpointing {'on' if use else 'off'}", why)]
    model = model_config_for(cfg) if cfg is not None else None
    if model is not None:
        config, label = model
        tokens = cfg.train.max_tokens_per_batch or cfg.train.per_device_train_batch_size * cfg.data.cutoff_len
        m = cfg.model   # a quantised base holds far less than the bf16 weights the shape alone would say
        state = held_state_gib(config, cfg)
        use, why = choose_gradient_checkpointing(config, tokens, budget, state_gib=state)
        limit = max_tokens_without_checkpointing(config, budget, state_gib=state)
        compiles = (info.backend == "cuda" and cfg.train.torch_compile is not False
                    and "torch_compile" not in speed_blockers(m.quantization_bit))
        findings = [Finding.info(check, f"gradient checkpointing {'on' if use else 'off'} for {label} at up to {tokens} "
                                        f"tokens per micro-batch on {where}" + (" with eager layers" if compiles else ""),
                                 f"{why}; it turns on above {limit} tokens")]
        if compiles:
            # A CUDA run long enough to compile its layers keeps less for backward (and, by default, recomputes the
            # elementwise results): train decides at start, from the run's length, which of the two applies.
            lean_use, lean_why = choose_gradient_checkpointing(config, tokens, budget, compiled=True, state_gib=state,
                                                               recompute_pointwise=cfg.train.recompute_pointwise
                                                               is not False)
            findings.append(Finding.info(check, f"gradient checkpointing {'on' if lean_use else 'off'} for {label} once "
                                                f"its layers compile (CUDA runs of {COMPILE_MIN_MICRO_BATCHES}+ "
                                                "micro-batches with static shapes)", lean_why))
        return findings
    limits = ", ".join(f"{shape} {max_tokens_without_checkpointing(_shape_config(shape), budget):,}"
                       for shape in REFERENCE_SHAPES)
    return [Finding.info(check, f"gradient checkpointing stays off up to these tokens per micro-batch on {where}: {limits}",
                         "train turns it on only when the weights and a micro-batch's activations would not fit in 85% of the "
                         "memory (and for small models whose layers it compiles)",
                         "doctor --config your.yaml gives the answer for your model and batch")]


def quantization_findings(info: "HardwareInfo", cfg: "RunConfig", check: str, offline: bool) -> list[Finding]:
    """quantization_bit: whether bitsandbytes can run it there (the floors train checks), and what the quantised run
    needs in memory (the estimate train prints at start), against the GPU's memory where known."""
    m = cfg.model
    if m.quantization_bit is None:
        return []
    gpu = info.primary
    status = bitsandbytes_status(info.backend, gpu.arch if gpu is not None else None, look_up=not offline)
    if offline and status.installed is None:
        findings = [Finding.info(check, f"quantization_bit: {m.quantization_bit} needs bitsandbytes >= {status.floor or '?'} "
                                        "there", status.why.replace("bitsandbytes is not installed (", "(").rstrip(")"),
                                 status.fix.replace("-U ", ""))]
    elif status.usable:
        findings = [Finding.info(check, f"quantization_bit: {m.quantization_bit} can run: {status.why}")]
    else:
        findings = [Finding.error(check, f"quantization_bit: {m.quantization_bit} cannot run: {status.why}",
                                  GATE_SOURCE, status.fix)]
    model = model_config_for(cfg)
    if model is not None:
        config, label = model
        tokens = cfg.train.max_tokens_per_batch or cfg.train.per_device_train_batch_size * cfg.data.cutoff_len
        precision, _ = choose_precision(info, cfg.train.bf16, cfg.train.fp16)
        budget = gpu.budget_gib if gpu is not None else None
        use, offloaded = cfg.train.gradient_checkpointing, bool(cfg.train.activation_offloading)
        if use is None:
            use = offloaded or choose_gradient_checkpointing(config, tokens, budget,
                                                             state_gib=held_state_gib(config, cfg))[0]
        base_bytes = 2.0 if precision == "bf16" else 4.0
        need, parts = quantized_memory(config, tokens, cfg.method.lora_rank, use, m.quantization_bit,
                                       m.double_quantization, base_bytes, offloaded=offloaded)
        where = f" of the {budget:g} GiB" if budget else ""
        if not use:   # what checkpointing would bring it down to (the 16 GB card question)
            low, _ = quantized_memory(config, tokens, cfg.method.lora_rank, True, m.quantization_bit,
                                      m.double_quantization, base_bytes)
            parts += f"; with gradient_checkpointing: true {low}"
        if not offloaded and info.backend != "cpu":   # and the layer inputs in host memory, lower still
            low, _ = quantized_memory(config, tokens, cfg.method.lora_rank, True, m.quantization_bit,
                                      m.double_quantization, base_bytes, offloaded=True)
            parts += f"; with activation_offloading: true {low}"
        findings.append(Finding.info(check, f"{label}, {describe_bits(m)}, {tokens:,} tokens a micro-batch: the run needs "
                                            f"{need}{where}", parts))
    return findings


def moe_findings(info: "HardwareInfo", cfg: "RunConfig", check: str) -> list[Finding]:
    """A mixture of experts' memory: all its experts' weights (in bf16, or 4-bit with quantization_bit: 4), every
    expert's LoRA pair, and activations from the experts a token is routed to (its active parameters); with no
    quantisation, what the run needs (quantization_findings says it for a quantised base)."""
    model = model_config_for(cfg)
    shape = moe.moe_shape(model[0]) if model is not None else None
    if shape is None:
        return []
    config, label = model
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    parts = moe.parameters_by_kind(config, shape)
    total, active = sum(parts.values()), moe.active_parameters(config, shape)
    m, rank = cfg.model, cfg.method.lora_rank
    tokens = cfg.train.max_tokens_per_batch or cfg.train.per_device_train_batch_size * cfg.data.cutoff_len
    weights = (f"weights {weight_gib(config):.1f} GiB in bf16 ({parts[moe.ROUTED_EXPERTS] / 1e9:.2f} B in the routed "
               "experts)")
    if m.quantization_bit == 4:
        weights += f", {quantised_weight_gib(config, m):.1f} GiB with quantization_bit: 4 (the experts in 4 bits too)"
    elif m.quantization_bit == 8:
        weights += (f", {quantised_weight_gib(config, m):.1f} GiB with quantization_bit: 8 (linear layers only: the "
                    "routed experts stay bf16; quantization_bit: 4 packs them too)")
    lora = lora_parameters(config, rank)
    why = (f"{weights}; LoRA with lora_target: all (r {rank} for each of the {shape.experts} experts and each "
           f"projection) {lora / 1e6:,.0f} M parameters, {lora_state_gib(config, rank):.1f} GiB with their gradients "
           f"and AdamW's moments; activations from the {shape.top_k} experts each token is routed to: "
           f"~{checkpointed_activation_gib(config, tokens):.1f} GiB at {tokens:,} tokens with gradient checkpointing, "
           f"~{activation_gib(config, tokens):.1f} GiB without")
    findings = [Finding.info(check, f"{label}: a mixture of experts, {shape.experts} experts x {shape.moe_layers} "
                                    f"layers, {shape.top_k} a token: {active / 1e9:.2f} B of {total / 1e9:.2f} B "
                                    "parameters active", why)]
    if m.quantization_bit is None:
        gpu = info.primary
        budget = gpu.budget_gib if gpu is not None else None
        use = cfg.train.gradient_checkpointing
        if use is None:
            use = choose_gradient_checkpointing(config, tokens, budget, state_gib=held_state_gib(config, cfg))[0]
        precision, _ = choose_precision(info, cfg.train.bf16, cfg.train.fp16)
        need, spelled = run_memory_gib(config, tokens, rank, use, base_bytes=2.0 if precision == "bf16" else 4.0,
                                       offloaded=bool(cfg.train.activation_offloading))
        low, _ = run_memory_gib(config, tokens, rank, True, quantised_bytes_per_parameter(4, m.double_quantization))
        where = f" of the {budget:g} GiB" if budget else ""
        findings.append(Finding.info(check, f"{label}, {tokens:,} tokens a micro-batch: the run needs ~{need:.1f} GiB"
                                            f"{where}", f"{spelled}; with quantization_bit: 4 and gradient "
                                                        f"checkpointing ~{low:.1f} GiB"))
    return findings


def fp8_findings(info: "HardwareInfo", cfg: "RunConfig", check: str) -> list[Finding]:
    """fp8_base for this config on this machine: train's default rule (model/fp8_base) read from the GPU's
    architecture and the model's shape, for a run whose layers compile (decided at start from its length), and
    when kernel_tuning would join it."""
    # lazy: model.fp8_base loads torch; doctor runs where torch does not import
    from steadytune.model.fp8_base import AUTO_MIN_HIDDEN, config_blocker, default_blocker_on, fp8_arch_support
    gpu = info.primary
    if cfg.train.fp8_base is not None:
        return [Finding.info(check, f"fp8_base: {str(cfg.train.fp8_base).lower()} is asked for")]
    if gpu is None:
        return []
    precision, _ = choose_precision(info, cfg.train.bf16, cfg.train.fp16)
    model = model_config_for(cfg)
    hidden = model[0].hidden_size if model is not None else None
    device_type = "cuda" if info.backend in ("cuda", "rocm") else info.backend
    # layers compile by default on CUDA (long runs); on ROCm only where torch_compile: true asks (not timed there)
    compiles = info.backend == "cuda" or cfg.train.torch_compile is True
    blocker = config_blocker(cfg) or default_blocker_on(device_type, fp8_arch_support(info.backend, gpu.arch),
                                                        precision, compiles, hidden or AUTO_MIN_HIDDEN)
    if blocker is not None and info.backend == "rocm":
        supported, how = fp8_arch_support("rocm", gpu.arch)
        if supported and not config_blocker(cfg):
            return [Finding.info(check, "fp8_base stays off by default on ROCm (not timed there yet)",
                                 f"{blocker}; fp8_base: true runs it: {how}")]
    if blocker is not None:
        return [Finding.info(check, "fp8_base stays off by default here", blocker)]
    if hidden is None:
        return [Finding.info(check, f"fp8_base: this GPU ({gpu.arch}) multiplies fp8; train uses it by default for "
                                    f"models of hidden size {AUTO_MIN_HIDDEN} and up",
                             "the model's config is not here to read; train decides at start and prints why")]
    tuning = (f"; kernel_tuning joins it for runs of {KERNEL_TUNING_MIN_MICRO_BATCHES:,}+ micro-batches"
              if info.backend == "cuda" else "")
    return [Finding.info(check, f"fp8_base: on by default for {model[1]} here once its layers compile (CUDA runs of "
                                f"{COMPILE_MIN_MICRO_BATCHES}+ micro-batches with static shapes){tuning}",
                         fp8_detail(cfg))]


def fp8_detail(cfg: "RunConfig") -> str:
    """What fp8_base does to this config's base, and what would still turn it off."""
    if cfg.model.quantization_bit == 4:
        return ("the 4-bit base's matmuls in fp8: its weights stay 4-bit and are unpacked straight into fp8 at each "
                "matmul (no copy kept); fp8_base: false keeps bitsandbytes' bf16 matmuls")
    return ("the frozen base's matmuls in fp8, unless its copies (2 bytes a base weight) would turn gradient "
            "checkpointing on, or DeepSpeed / FSDP shard the base (train reads the sharding at start); fp8_base: "
            "false keeps the bf16 base")


def describe_bits(model_args) -> str:
    if model_args.quantization_bit == 8:
        return "8-bit base"
    return f"4-bit {model_args.quantization_type} base" + (" (double quantisation)" if model_args.double_quantization else "")


def rocm_path_findings(info: "HardwareInfo", check: str) -> list[Finding]:
    """Where ROCm is not CUDA, what a run on this AMD GPU takes, each with its reason and source
    (hardware/rocm_path.py)."""
    gpu = info.primary
    if info.backend != "rocm" or gpu is None or not gpu.arch:
        return []
    count = sum(1 for g in info.gpus if g.arch == gpu.arch and not g.integrated)
    return [Finding.info(check, f"ROCm {entry.topic}: {entry.choice}", f"{entry.why} [source: {entry.source}]")
            for entry in rocm_path(gpu.arch, max(count, 1), rocm_tuple(info.hip_version))]


def kernel_findings(info: "HardwareInfo", check: str) -> list[Finding]:
    """Which of steadytune's Triton kernels the GPU's architecture runs: each feature's kernels built for it without
    a spill (model/kernel_builds.py, from the compiled code), or refused there with the reason and its fallback."""
    gpu = info.primary
    if info.backend not in ("cuda", "rocm") or gpu is None or not gpu.arch:
        return []
    findings = []
    for feature in FEATURES:
        ok, why = feature_verdict(feature, gpu.arch)
        state = ("not used on" if why.startswith("not used") else "refused on" if not ok
                 else "built for" if record_target(gpu.arch) is not None else "not built in CI for")
        findings.append(Finding.info(check, f"Triton kernels of {feature}: {state} {gpu.arch}", why))
    return findings


def train_plan_findings(info: "HardwareInfo", check: str, cfg: Optional["RunConfig"] = None,
                        offline: bool = True) -> list[Finding]:
    """All of train's hardware-dependent choices for `info`."""
    base = cfg or _default_config()
    findings = precision_and_attention(info, base, check)
    findings += rocm_path_findings(info, check) + kernel_findings(info, check)
    try:
        findings += packing_findings(info, base, check, offline)
        findings += checkpointing_findings(info, cfg, check)
        if cfg is not None:
            findings += long_context_findings(info, cfg, check, offline)
            findings += quantization_findings(info, cfg, check, offline)
            findings += moe_findings(info, cfg, check)
            findings += fp8_findings(info, cfg, check)
            findings += layout_findings(cfg, check)
    except ImportError as e:   # torch or transformers missing here: the saved machine's plan is still partly known
        findings.append(Finding.info(check, f"packing and gradient checkpointing not evaluated here ({e})"))
    except UserError as e:     # what train refuses before anything loads (a config.json field): said as train says it
        findings.append(Finding.error(check, str(e), fix="fix the model folder's config.json"))
    return findings


def layout_findings(cfg: "RunConfig", check: str) -> list[Finding]:
    """train's refusals of cp_size and sequence_tiling on this model (check_layout_before_loading), as errors."""
    model = model_config_for(cfg)
    if model is None:
        return []
    from steadytune.model.attention import unsplittable  # lazy: loads torch; doctor runs where torch does not import
    from steadytune.model.load import model_skeleton  # lazy: loads torch
    from steadytune.model.tiling import tiling_blocker  # lazy: loads torch
    config, _ = model
    findings = []
    t = cfg.train
    why = unsplittable(config, cfg.data.cutoff_len) if t.cp_size > 1 else None
    if why:
        findings.append(Finding.error(check, f"cp_size: {t.cp_size} splits each row over processes, but {why}",
                                      fix="set cp_size: 1"))
    skeleton = model_skeleton(cfg.model) if t.sequence_tiling else None
    blocker = tiling_blocker(skeleton, cfg.method.lora_dropout) if skeleton is not None else None
    if blocker:
        findings.append(Finding.error(check, f"sequence_tiling: true, but {blocker}", fix="set sequence_tiling: false"))
    return findings


def run_state_gib(config, cfg: "RunConfig") -> float:
    """What the run holds beside its activations, by method: LoRA (or OFT) with lora_target: all over the base
    (quantised as asked), its gradients and AdamW's moments; full fine-tuning every weight with its gradient and
    AdamW's moments in fp32 (16 bytes a parameter)."""
    m = cfg.model
    if cfg.method.finetuning_type == "full":
        return estimate_parameters(config) * 16 / 2**30
    quantized = quantised_bytes_per_parameter(m.quantization_bit, m.double_quantization) \
        if m.quantization_bit is not None else None
    return lora_run_state_gib(config, cfg.method.lora_rank, quantized)


def long_context_findings(info: "HardwareInfo", cfg: "RunConfig", check: str, offline: bool) -> list[Finding]:
    """The long-context memory plan for this config on this GPU (hardware/long_context.py, what train prints at
    start): the longest cutoff_len each memory lever fits, what train would choose at the config's micro-batch, and
    cutoff_len against the model's window."""
    model = model_config_for(cfg)
    gpu = info.primary
    if model is None:
        return []
    config, label = model
    findings = []
    from steadytune.model.attention import unsplittable   # lazy: model.attention loads torch
    from steadytune.model.config_values import model_window   # lazy: transformers
    window = model_window(config)   # max_position_embeddings x the RoPE scaling of its config.json, as train counts it
    if window and cfg.data.cutoff_len > window:
        findings.append(Finding.warn(check, f"cutoff_len {cfg.data.cutoff_len:,} is longer than {label}'s window "
                                            f"({window:,} positions)",
                                     "examples longer than the window train at positions the model never saw "
                                     "(the rope_scaling key is not supported); train says so at start and counts them",
                                     f"cutoff_len: {window}"))
    if gpu is None or not gpu.budget_gib:
        return findings
    budget = gpu.budget_gib
    ram = None if offline else system_memory_gib()
    tile = cfg.train.sequence_tile_tokens or DEFAULT_LEVER_TILE
    state = run_state_gib(config, cfg)
    act = 4 if cfg.method.finetuning_type == "full" else 2
    levers = describe_levers(config, state, budget, ram, tile, act)
    tokens = cfg.train.max_tokens_per_batch or cfg.train.per_device_train_batch_size * cfg.data.cutoff_len
    ram_text = f", {ram:.0f} GiB RAM" if ram else ", RAM not known here (offloading levers left out)"
    findings.append(Finding.info(check, f"longest cutoff_len for {label} ({cfg.method.finetuning_type}) on "
                                        f"{budget:g} GiB{ram_text}: {levers}",
                                 "one sequence a micro-batch; estimates of the peak allocated memory "
                                 "(hardware/long_context.py), fitted to 94% of the GPU less 1.5 GiB for its context"))
    if tokens >= 32768:
        for lever in ("checkpointing", "tiling", "tiling + offloading"):
            estimate = estimate_for(lever, config, tokens, state, budget, ram, tile, act)
            if estimate is not None and estimate.gpu_gib <= room_gib(budget):
                findings.append(Finding.info(check, f"at {tokens:,} tokens a micro-batch train would use {lever}: "
                                                    f"{estimate.describe()}"))
                break
        else:
            findings.append(Finding.warn(check, f"{tokens:,} tokens a micro-batch do not fit {budget:g} GiB with any "
                                                "lever here", f"the levers' longest: {levers}",
                                         "lower cutoff_len (or max_tokens_per_batch)" + (
                                             "" if unsplittable(config, cfg.data.cutoff_len) else
                                             ", or split the sequence over GPUs with cp_size")))
    return findings
