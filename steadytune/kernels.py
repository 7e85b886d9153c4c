"""Speed-ups applied to a loaded model, and the one policy that decides which of them a run gets.

`plan_speed` decides static shapes, torch.compile, CUDA graphs and liger-kernel for a run from what is known
before it starts (backend, packing kernel, processes, precision, run length), each with its reason for
run_config.yaml's decisions; `choose_gradient_checkpointing` decides checkpointing from the memory budget. `train`
and `bench` both call them, so a bench number is what a training run gets by default.

The speed-ups themselves: liger-kernel's fused RMSNorm / RoPE / SwiGLU, regional torch.compile (each decoder
layer, one compiled graph per layer type), and skipping peft's no-op LoRA input cast. Each is a plain function
returning what it did, never raising for a missing optional package: speed features must not stop a run that would
otherwise work (a key that *asks* for one is the recipe's business: it raises).
"""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass, field

import torch

# model_type -> liger-kernel's patching function name (liger_kernel.transformers). The loss is ours (loss.py),
# so liger's fused linear cross-entropy is switched off when patching.
LIGER_PATCHES = {
    "qwen2": "apply_liger_kernel_to_qwen2",
    "qwen3": "apply_liger_kernel_to_qwen3",
    "llama": "apply_liger_kernel_to_llama",
    "mistral": "apply_liger_kernel_to_mistral",
    "gemma3_text": "apply_liger_kernel_to_gemma3_text",
}


def base_model_of(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def apply_liger_kernels(model: torch.nn.Module) -> tuple[bool, str]:
    """Swap in liger-kernel's fused RMSNorm, RoPE and SwiGLU on this model instance, where supported."""
    base = base_model_of(model)
    model_type = getattr(base.config, "model_type", "?")
    name = LIGER_PATCHES.get(model_type)
    if name is None:
        return False, f"liger-kernel: no patch for model type {model_type}"
    if not next(base.parameters()).is_cuda:
        return False, "liger-kernel: its Triton kernels need a GPU"
    try:
        import liger_kernel.transformers as liger
    except ImportError:
        return False, "liger-kernel is not installed (pip install liger-kernel)"
    patch = getattr(liger, name)
    wanted = dict(model=base, rope=True, rms_norm=True, swiglu=True, geglu=True, cross_entropy=False,
                  fused_linear_cross_entropy=False)
    accepted = inspect.signature(patch).parameters
    patch(**{k: v for k, v in wanted.items() if k in accepted})
    return True, f"liger-kernel: fused RMSNorm, RoPE, SwiGLU for {model_type}"


# torch.compile's backend for the layers (tests swap in one that counts compilations).
COMPILE_BACKEND = "inductor"


def decoder_layers(model: torch.nn.Module):
    return getattr(getattr(base_model_of(model), "model", None), "layers", None)


def compile_layers(model: torch.nn.Module, static_shapes: bool = False) -> tuple[bool, str]:
    """Compile each decoder layer on its own ("regional" compilation): one compiled graph reused by every layer
    of a type (Gemma 3's sliding and full layers are two), so compile time does not grow with depth.

    static_shapes: every micro-batch has one shape (packing.StaticShape), so the layers are compiled for exactly
    that shape, once. Without it, packed rows change length every step: shapes are marked dynamic from the start
    (the first new length would otherwise recompile), and some values the layers see still recompile."""
    layers = decoder_layers(model)
    if layers is None:
        return False, "torch.compile: no decoder layers found"
    for layer in layers:
        layer.compile(dynamic=not static_shapes, backend=COMPILE_BACKEND)
    mark_fused_cross_entropy(model, True)
    kinds = len({getattr(layer, "attention_type", None) for layer in layers})
    shapes = "one static shape: compiled once" + (f" per layer type ({kinds})" if kinds > 1 else "")
    return True, f"torch.compile: {len(layers)} decoder layers, " + (shapes if static_shapes else "dynamic shapes")


def uncompile_layers(model: torch.nn.Module) -> None:
    """Back to eager layers after training: scoring and generation come in many shapes, each of which would
    compile again. (nn.Module.compile keeps the compiled callable in `_compiled_call_impl`; torch has no public
    way to drop it.)"""
    for layer in decoder_layers(model) or []:
        if getattr(layer, "_compiled_call_impl", None) is not None:
            layer._compiled_call_impl = None
    mark_fused_cross_entropy(model, False)


def mark_fused_cross_entropy(model: torch.nn.Module, on: bool) -> None:
    """Let the loss's chunked cross-entropy run its softmax arithmetic compiled (loss.chunk_loss_and_grad, on a
    GPU): wherever the layers are compiled, so is the head's loss, which eager makes ~8 passes over the logits."""
    from steadytune.loss import FUSED_CHUNK_FLAG, output_head
    try:
        head = output_head(model)
    except (AttributeError, TypeError, ValueError):
        return
    if isinstance(head, torch.nn.Module):
        setattr(head, FUSED_CHUNK_FLAG, on)


def eager_layers():
    """Run compiled layers eagerly inside this block (evaluation during training: padded batches of many shapes
    that would each compile again)."""
    import contextlib
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    return set_stance("force_eager") if set_stance else contextlib.nullcontext()


def skip_lora_input_cast(model: torch.nn.Module) -> tuple[int, str]:
    """Stop peft from casting each LoRA layer's input to the adapter's fp32 dtype; -> (layers changed, reason).

    With a bf16 base and fp32 adapters every forward runs under autocast, which casts that fp32 copy straight
    back to bf16 for the adapter's matmul. The round trip is exact (bf16 -> fp32 -> bf16), so skipping it changes
    no value, forward or backward, and saves two elementwise kernels and one more bf16 copy of the input kept
    for backward, per LoRA layer (seven per decoder layer with lora_target all). Only for models that are only
    ever run under autocast: without it, a bf16 input would meet an fp32 weight."""
    changed = 0
    for module in model.modules():
        if hasattr(module, "cast_input_dtype_enabled") and hasattr(module, "lora_A"):
            module.cast_input_dtype_enabled = False
            changed += 1
    return changed, (f"LoRA inputs stay in the compute dtype under autocast ({changed} layers): peft's cast to "
                     f"fp32 would be undone by autocast at once")


def activation_bytes_per_token(config) -> int:
    """Rough bytes kept for backward per token with LoRA on all linear layers, bf16 base, no checkpointing:
    the inputs of the LoRA'd projections, the attention output, the MLP's gate/up/activation outputs, the norms.
    An upper bound: see ACTIVATION_SHARE for what was measured."""
    hidden = config.hidden_size
    inter = config.intermediate_size
    return config.num_hidden_layers * (24 * hidden + 12 * inter)


# Measured share of activation_bytes_per_token really kept at 16,384 tokens a micro-batch on an H200 (peak minus
# weights): Qwen2.5-0.5B shape 0.74, Qwen2.5-1.5B 0.72 eager; compiled layers 0.56 (1.5B: Inductor recomputes
# cheap elementwise results instead of keeping them). Rounded up for a margin.
ACTIVATION_SHARE = {False: 0.8, True: 0.65}
# Share of the memory budget that weights, optimizer state and activations may fill before checkpointing is
# turned on (the rest: allocator fragmentation, the loss's chunk of logits, CUDA context).
MEMORY_SHARE = 0.85
# Decoder width up to which recomputing a layer is cheap once the layers are compiled (the GPU waits on memory
# and launches, not on math): Qwen2.5-0.5B shape (hidden 896), H200, 16,384 tokens: 63,183 tokens/s with
# checkpointing on and compiled layers against 65,975 eager without, at 3.4 against 23.6 GiB.
CHEAP_RECOMPUTE_HIDDEN = 1024


def estimate_parameters(config) -> int:
    """Parameters of a decoder from its config (attention, MLP, norms, embeddings; tied or not)."""
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    embeddings = config.vocab_size * hidden * (1 if getattr(config, "tie_word_embeddings", True) else 2)
    return layers * (attention + 3 * hidden * inter) + embeddings


def state_gib_of(config, bytes_per_parameter: float = 2.0) -> float:
    """Memory of the frozen weights (bf16 LoRA base: 2 bytes a parameter; LoRA's own state is small)."""
    return estimate_parameters(config) * bytes_per_parameter / 2**30


def activation_gib(config, tokens: int, compiled: bool = False) -> float:
    return ACTIVATION_SHARE[compiled] * activation_bytes_per_token(config) * tokens / 2**30


def max_tokens_without_checkpointing(config, memory_budget_gib: float, compiled: bool = False,
                                     state_gib: float | None = None) -> int:
    """The largest micro-batch (in tokens) whose activations fit beside the weights in MEMORY_SHARE of the
    budget: above it, `choose_gradient_checkpointing` turns checkpointing on."""
    state = state_gib_of(config) if state_gib is None else state_gib
    room = max(0.0, MEMORY_SHARE * memory_budget_gib - state)
    return int(room * 2**30 // (ACTIVATION_SHARE[compiled] * activation_bytes_per_token(config)))


def choose_gradient_checkpointing(config, tokens_per_micro_batch: int, memory_budget_gib: float | None,
                                  requested: bool | None = None, compiled: bool = False,
                                  state_gib: float | None = None) -> tuple[bool, str]:
    """-> (checkpoint activations?, reason).

    On when the weights and a micro-batch's activations would not fit in MEMORY_SHARE of the budget
    (recomputation costs a third more compute, worth it when memory is what limits), and for small models whose
    layers are compiled, where recomputing costs little and saves most of the memory. Off otherwise."""
    if requested is not None:
        return requested, f"gradient_checkpointing: {str(requested).lower()} was asked for"
    need = activation_gib(config, tokens_per_micro_batch, compiled)
    if memory_budget_gib is None:
        return False, f"off: no memory budget known (activations ~{need:.1f} GiB)"
    state = state_gib_of(config) if state_gib is None else state_gib
    if state + need > MEMORY_SHARE * memory_budget_gib:
        return True, (f"on: activations ~{need:.1f} GiB + weights ~{state:.1f} GiB would exceed "
                      f"{MEMORY_SHARE:.0%} of the {memory_budget_gib:.0f} GiB budget")
    if compiled and config.hidden_size <= CHEAP_RECOMPUTE_HIDDEN:
        return True, (f"on: a small model (hidden {config.hidden_size}) with compiled layers recomputes cheaply "
                      f"(measured ~4% slower at ~1/7 of the memory); activations would be ~{need:.1f} GiB")
    return False, (f"off: activations ~{need:.1f} GiB + weights ~{state:.1f} GiB fit in {MEMORY_SHARE:.0%} of the "
                   f"{memory_budget_gib:.0f} GiB budget")


# ---------------------------------------------------------------------------------------------------------
# The speed policy
# ---------------------------------------------------------------------------------------------------------

# Compiling the layers costs tens of seconds once (one static shape); it pays when the run has enough
# micro-batches to win that back. Qwen2.5-1.5B shape on an H200: 0.29 s a compiled micro-batch of 16,384 tokens
# against 0.41 s eager. The GPU-sized demo (Gemma 3 270M, 247 micro-batches) lost: ~70 s of compiling for 46 s
# of training (dynamic shapes then).
COMPILE_MIN_MICRO_BATCHES = 400


@dataclass
class SpeedPlan:
    """What a run gets, each with the reason recorded in run_config.yaml's decisions."""
    static_shapes: bool = False
    compile: bool = False
    cuda_graphs: bool = False
    liger: bool = False
    reasons: dict = field(default_factory=dict)

    def decide_into(self, cfg) -> None:
        for key, value in (("static_shapes", self.static_shapes), ("torch_compile", self.compile),
                           ("cuda_graphs", self.cuda_graphs), ("use_liger_kernel", self.liger)):
            cfg.decide(key, value, self.reasons[key])


def liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


class SpeedUnavailable(ValueError):
    """A speed feature was asked for (key: true) where it cannot run; the message says why."""


# Static shapes pad every micro-batch to the largest; below this share of real tokens that costs more than
# compiled layers or graphs win (a token budget below cutoff_len makes one long example set the shape for all).
MIN_STATIC_FILL = 0.75


def plan_speed(backend: str, packing_attention: str | None, micro_batches: int, world_size: int = 1,
               precision: str = "bf16", compile_asked: bool | None = None, graphs_asked: bool | None = None,
               liger_asked: bool | None = None, blockers: dict | None = None,
               static_ok: tuple[bool, str] = (True, ""), static_fill: float | None = None,
               gradient_hooks: bool | None = None) -> SpeedPlan:
    """The speed features of a run, decided in one place.

    backend: cuda | rocm | mps | cpu. packing_attention: varlen | sdpa | flex, or None when unpacked.
    micro_batches: how many the run will compute (forward + backward). *_asked: the user's key (None = unset).
    blockers: reasons that rule CUDA graphs out ({"fault_injection": "..."}): anything that must run eagerly
    between forward and backward. static_ok: whether the packing kernel takes padded static rows (varlen needs
    empty sequences in cu_seq_lens: packing.varlen_static_status), with the reason. static_fill: the share of
    real tokens once every micro-batch is padded to the static shape (StaticShape.fill). gradient_hooks: whether
    a collective runs inside the backward (DDP's hooks; default: with several processes); LoRA's flat all-reduce
    after the backward leaves the micro-batch graphable.
    Raises SpeedUnavailable for a feature asked for that cannot run here."""
    plan = SpeedPlan()
    r = plan.reasons
    gpu = backend in ("cuda", "rocm")
    if static_ok[0] and static_fill is not None and static_fill < MIN_STATIC_FILL:
        static_ok = (False, f"padding every micro-batch to one shape would waste {1 - static_fill:.0%} of the "
                            "compute (is max_tokens_per_batch below cutoff_len?)")
    static_possible = packing_attention in ("varlen", "sdpa") and static_ok[0]
    why_no_static = ("not packed: padded batches change shape every step" if packing_attention is None else
                     f"packing attention {packing_attention} builds its own masks per batch"
                     if packing_attention not in ("varlen", "sdpa") else static_ok[1])

    # --- CUDA graphs: the whole forward + backward of a micro-batch replayed as one launch ----------------
    graph_blockers = dict(blockers or {})
    if backend != "cuda":
        graph_blockers["backend"] = (f"{backend}: HIP graphs exist but have not been tried here" if backend == "rocm"
                                     else f"{backend} has no CUDA graphs")
    if packing_attention != "varlen":
        graph_blockers["packing"] = ("needs varlen packing (one row with cu_seq_lens); " +
                                     (why_no_static if packing_attention is None else
                                      f"this run packs with {packing_attention}, whose masks read the GPU"))
    elif not static_ok[0]:
        graph_blockers["static"] = static_ok[1]
    if gradient_hooks if gradient_hooks is not None else world_size > 1:
        graph_blockers["processes"] = f"{world_size} processes: DDP's gradient hooks run between the kernels"
    if precision == "fp16":
        graph_blockers["precision"] = "fp16's loss scaler decides on the host after backward"
    if graphs_asked is False:
        r["cuda_graphs"] = "cuda_graphs: false"
    elif graph_blockers:
        why = "; ".join(graph_blockers.values())
        if graphs_asked:
            raise SpeedUnavailable(f"cuda_graphs: true, but {why}; set cuda_graphs: false")
        r["cuda_graphs"] = f"off: {why}"
    else:
        plan.cuda_graphs = True
        r["cuda_graphs"] = ("on: one static shape per micro-batch, " +
                            ("one process" if world_size == 1 else f"{world_size} processes whose gradients are summed "
                             "after the backward") + ", no host syncs in the step: forward "
                            "and backward replay as one graph instead of thousands of launches (checked against an "
                            "eager micro-batch at start)" + ("" if graphs_asked else "; cuda_graphs: false turns it off"))

    # --- torch.compile of the decoder layers --------------------------------------------------------------
    if compile_asked is False:
        r["torch_compile"] = "torch_compile: false"
    elif compile_asked:
        plan.compile = True
        r["torch_compile"] = "torch_compile: true was asked for"
    elif backend != "cuda":
        r["torch_compile"] = (f"off by default on {backend}: Inductor emits Triton there too, but it has not been "
                              "timed here; torch_compile: true turns it on" if backend == "rocm" else
                              f"off by default on {backend}: compiling takes longer than it saves on short runs")
    elif not triton_installed():
        r["torch_compile"] = "off: Inductor needs triton, which is not installed"
    elif not static_possible:
        r["torch_compile"] = f"off by default: no static shapes ({why_no_static}), so it would recompile"
    elif micro_batches < COMPILE_MIN_MICRO_BATCHES:
        r["torch_compile"] = (f"off by default: {micro_batches} micro-batches are too few to win back the compile "
                              f"time (on from {COMPILE_MIN_MICRO_BATCHES}); torch_compile: true turns it on")
    else:
        plan.compile = True
        r["torch_compile"] = (f"on: CUDA, static shapes, {micro_batches} micro-batches (from "
                              f"{COMPILE_MIN_MICRO_BATCHES} the compile time pays); torch_compile: false turns it off")

    # --- static shapes: only where something reuses them (padding costs a little compute) -----------------
    if plan.compile or plan.cuda_graphs:
        plan.static_shapes = static_possible
        r["static_shapes"] = ("on: packed micro-batches padded to one shape, so the " +
                              " and ".join(n for n, on in (("compiled layers", plan.compile),
                                                           ("CUDA graph", plan.cuda_graphs)) if on) +
                              " serve every step" if static_possible else f"off: {why_no_static}")
    else:
        r["static_shapes"] = "off: nothing compiled or graphed reuses a fixed shape"

    # --- liger-kernel: fused RMSNorm / RoPE / SwiGLU ------------------------------------------------------
    if liger_asked is False:
        r["use_liger_kernel"] = "use_liger_kernel: false"
    elif liger_asked:
        plan.liger = True
        r["use_liger_kernel"] = "use_liger_kernel: true was asked for"
    elif not gpu:
        r["use_liger_kernel"] = f"off: its Triton kernels need a GPU ({backend})"
    elif plan.compile:
        r["use_liger_kernel"] = "off: the compiled layers fuse RMSNorm, RoPE and SwiGLU themselves"
    elif not liger_installed():
        r["use_liger_kernel"] = "off: liger-kernel is not installed (pip install liger-kernel)"
    else:
        plan.liger = True
        r["use_liger_kernel"] = "on: liger-kernel is installed and the layers are not compiled"
    return plan
