"""The memory side of the policy: activation and weight estimates from a model config, and whether a run
checkpoints its activations (`choose_gradient_checkpointing`) for the memory budget it has.

A mixture of experts (hardware/moe_shape.py) counts all its experts' weights and every expert's LoRA pair, but the
activations of the experts each token is routed to (top_k of them), not a dense MLP of `intermediate_size`.
"""

from __future__ import annotations

from steadytune.hardware import moe_shape as moe
from steadytune.hardware.layer_shapes import layer_shapes


def layer_activation_bytes(config) -> list[int]:
    """Rough bytes each decoder layer keeps for backward per token with LoRA on all linear layers, bf16 base, no
    checkpointing: the inputs of the LoRA'd projections, the attention output, the MLP's gate/up/activation outputs,
    the norms; in a MoE layer the top_k experts' rows (moe_shape.moe_mlp_bytes_per_token). An upper bound: see
    ACTIVATION_SHARE for what was measured (on dense models)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    shape = moe.moe_shape(config)
    if shape is None:
        return [24 * hidden + 12 * config.intermediate_size] * layers
    routed = 24 * hidden + moe.moe_mlp_bytes_per_token(config, shape)
    dense = 24 * hidden + 12 * shape.dense_width
    return [routed if moe.is_moe_layer(config, i) else dense for i in range(layers)]


def kept_between_layers_bytes(config) -> int:
    """Bytes per token the decoder keeps outside its layers until the loss, beyond each layer's input: a MoE's
    router logits and probabilities (routing.py's load-balancing loss reads them)."""
    shape = moe.moe_shape(config)
    return 0 if shape is None else shape.moe_layers * moe.router_bytes_between_layers(shape)


def activation_bytes_per_token(config) -> int:
    """Bytes kept for backward per token by the whole decoder without checkpointing (layer_activation_bytes)."""
    return sum(layer_activation_bytes(config)) + kept_between_layers_bytes(config)


# Measured share of activation_bytes_per_token really kept at 16,384 tokens a micro-batch on an H200 (peak minus
# weights): Qwen2.5-0.5B shape 0.74, Qwen2.5-1.5B 0.72 eager; compiled layers 0.56 (1.5B: Inductor recomputes
# cheap elementwise results instead of keeping them). Rounded up for a margin.
ACTIVATION_SHARE = {False: 0.8, True: 0.65}
# With recompute_pointwise the compiled layers keep this share of what they keep without it: 50,092 of 98,732 bf16
# values a token at the Qwen2.5-7B widths (benchmarks/saved_activations.py, counted on a CPU; not yet checked
# against a GPU's peak memory). Rounded up for a margin.
RECOMPUTE_POINTWISE_SHARE = 0.55
# Share of the memory budget that weights, optimizer state and activations may fill before checkpointing is
# turned on (the rest: allocator fragmentation, the loss's chunk of logits, CUDA context).
MEMORY_SHARE = 0.85
# Decoder width up to which recomputing a layer is cheap once the layers are compiled (the GPU waits on memory
# and launches, not on math): Qwen2.5-0.5B shape (hidden 896), H200, 16,384 tokens: 63,183 tokens/s with
# checkpointing on and compiled layers against 65,975 eager without, at 3.4 against 23.6 GiB.
CHEAP_RECOMPUTE_HIDDEN = 1024
# The smallest micro-batch worth suggesting instead of checkpointing. QLoRA 7B shape, H200, no checkpointing,
# 2026-12-03 (docs/speed.md): 4,096-token micro-batches ran 16,016 tokens/s at 18.1 GiB and 2,048 ran 13,901 at
# 12.1 GiB, against 12,135 at 14.4 GiB for 16,384 with checkpointing (another call); at 1,024 (10,903 at 9.0 GiB)
# the small matmuls had lost what not recomputing gains.
SPLIT_FLOOR_TOKENS = 2048


def _linear_parameters_of_layers(config) -> int:
    """Parameters of a dense decoder's attention and MLP projections, layer by layer (Gemma 4's full-attention layers
    have larger heads than its sliding ones: hardware/layer_shapes.py)."""
    hidden = config.hidden_size
    return sum(hidden * s.head_dim * (2 * s.heads + 2 * s.kv_heads) + 3 * hidden * s.intermediate
               for s in layer_shapes(config))


def estimate_parameters(config) -> int:
    """Parameters of a decoder from its config (attention, MLP, norms, embeddings; tied or not; a mixture of experts
    with every expert)."""
    shape = moe.moe_shape(config)
    if shape is not None:
        return sum(moe.parameters_by_kind(config, shape).values())
    embeddings = config.vocab_size * config.hidden_size * (1 if getattr(config, "tie_word_embeddings", True) else 2)
    return _linear_parameters_of_layers(config) + embeddings


def state_gib_of(config, bytes_per_parameter: float = 2.0) -> float:
    """Memory of the frozen weights (bf16 LoRA base: 2 bytes a parameter; LoRA's own state is small)."""
    return estimate_parameters(config) * bytes_per_parameter / 2**30


def held_gib(tensors) -> float:
    """GiB held by these tensors (a model's parameters and buffers: fp8_base's copies of the base are buffers), each
    piece of memory once: a buffer that is a view of a weight (a 4-bit base's packed bytes under fp8_4bit) adds
    nothing, and a tensor that repeats one element (a 4-bit expert weight's placeholder: a zero-stride view) counts
    the bytes it holds, not its shape."""
    held: dict[tuple, int] = {}
    for t in tensors:
        key = (t.device, t.data_ptr()) if t.data_ptr() else ("no storage", id(t))
        spans = t.numel() and (1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())))
        held[key] = max(held.get(key, 0), min(t.numel(), spans) * t.element_size())
    return sum(held.values()) / 2**30


def expert_rows_bytes_per_token(config) -> int:
    """Of activation_bytes_per_token, the grouped experts' rows of every MoE layer (top_k per token: the gathered
    input, gate/up, the activation, the expert output): matmul outputs and gathers, which neither the compiler nor
    recompute_pointwise recomputes, so the measured shares (dense models) do not shrink them. On the H200 the
    Qwen3-30B-A3B shape at 16,384 tokens ran out of 140 GiB where the shares applied to them said 105 GiB."""
    shape = moe.moe_shape(config)
    if shape is None:
        return 0
    return shape.moe_layers * (moe.moe_mlp_bytes_per_token(config, shape) - 12 * shape.shared_width
                               - 8 * shape.experts)


def activation_bytes_kept(config, compiled: bool = False, recompute_pointwise: bool = False) -> float:
    """Bytes per token a micro-batch keeps for backward without checkpointing: the measured share of the rest, the
    expert rows whole."""
    share = ACTIVATION_SHARE[compiled] * (RECOMPUTE_POINTWISE_SHARE if compiled and recompute_pointwise else 1.0)
    rows = expert_rows_bytes_per_token(config)
    return share * (activation_bytes_per_token(config) - rows) + rows


def activation_gib(config, tokens: int, compiled: bool = False, recompute_pointwise: bool = False) -> float:
    return activation_bytes_kept(config, compiled, recompute_pointwise) * tokens / 2**30


def max_tokens_without_checkpointing(config, memory_budget_gib: float, compiled: bool = False,
                                     state_gib: float | None = None) -> int:
    """The largest micro-batch (in tokens) whose activations fit beside the weights in MEMORY_SHARE of the
    budget: above it, `choose_gradient_checkpointing` turns checkpointing on."""
    state = state_gib_of(config) if state_gib is None else state_gib
    room = max(0.0, MEMORY_SHARE * memory_budget_gib - state)
    return int(room * 2**30 // activation_bytes_kept(config, compiled))


def choose_gradient_checkpointing(config, tokens_per_micro_batch: int, memory_budget_gib: float | None,
                                  requested: bool | None = None, compiled: bool = False,
                                  state_gib: float | None = None, recompute_pointwise: bool = False) -> tuple[bool, str]:
    """-> (checkpoint activations?, reason).

    On when the weights and a micro-batch's activations would not fit in MEMORY_SHARE of the budget
    (recomputation costs a third more compute, worth it when memory is what limits), and for small models whose
    layers are compiled, where recomputing costs little and saves most of the memory. Off otherwise."""
    if requested is not None:
        return requested, f"gradient_checkpointing: {str(requested).lower()} was asked for"
    need = activation_gib(config, tokens_per_micro_batch, compiled, recompute_pointwise)
    if memory_budget_gib is None:
        return False, f"off: no memory budget known (activations ~{need:.1f} GiB)"
    state = state_gib_of(config) if state_gib is None else state_gib
    room = MEMORY_SHARE * memory_budget_gib
    if state + need > room:
        lean = activation_gib(config, tokens_per_micro_batch, compiled, recompute_pointwise=True)
        hint = (f"; recompute_pointwise: true would keep ~{lean:.1f} GiB and fit without checkpointing, recomputing "
                "elementwise ops only" if compiled and not recompute_pointwise and state + lean <= room else "")
        split = split_to_fit(config, tokens_per_micro_batch, room - state, compiled, recompute_pointwise)
        if split and not hint:
            hint = (f"; micro-batches of {tokens_per_micro_batch // split:,} tokens ({split}x "
                    f"gradient_accumulation_steps for the same tokens a step: max_tokens_per_batch, or "
                    f"per_device_train_batch_size) would fit without checkpointing, usually faster than recomputing")
        return True, (f"on: activations ~{need:.1f} GiB + weights ~{state:.1f} GiB would exceed "
                      f"{MEMORY_SHARE:.0%} of the {memory_budget_gib:.0f} GiB budget" + hint)
    if compiled and config.hidden_size <= CHEAP_RECOMPUTE_HIDDEN:
        return True, (f"on: a small model (hidden {config.hidden_size}) with compiled layers recomputes cheaply "
                      f"(measured ~4% slower at ~1/7 of the memory); activations would be ~{need:.1f} GiB")
    return False, (f"off: activations ~{need:.1f} GiB + weights ~{state:.1f} GiB fit in {MEMORY_SHARE:.0%} of the "
                   f"{memory_budget_gib:.0f} GiB budget")


def checkpointed_activation_gib(config, tokens: int, compiled: bool = False, offloaded: bool = False) -> float:
    """Activations with gradient checkpointing: each layer's input in bf16 (none on the GPU when offloaded to host
    memory: activation_offloading) and a MoE's router outputs, plus the largest layer's activations while it is
    recomputed."""
    inputs = 0 if offloaded else config.num_hidden_layers * config.hidden_size * 2
    per_token = inputs + kept_between_layers_bytes(config) + max(layer_activation_bytes(config))
    return ACTIVATION_SHARE[compiled] * per_token * tokens / 2**30


def choose_activation_offloading(config, tokens_per_micro_batch: int, memory_budget_gib: float | None,
                                 checkpointing: bool, state_gib: float, compiled: bool = False,
                                 requested: bool | None = None, blocker: str | None = None) -> tuple[bool, str]:
    """-> (keep the checkpointed layers' inputs in host memory?, reason).

    On where checkpointing alone would still not fit in MEMORY_SHARE of the budget: the copies cost ~3% of the
    tokens/s (QLoRA 7B on an H200 at 16,384 tokens), a price only worth paying for memory. Off otherwise, and
    wherever `blocker` (model/offload.offloading_blocker) says it cannot run."""
    if requested is not None:
        return requested, f"activation_offloading: {str(requested).lower()} was asked for"
    if not checkpointing:
        return False, "off: gradient checkpointing is off (offloading moves what it keeps)"
    if memory_budget_gib is None:
        return False, "off: no memory budget known"
    room = MEMORY_SHARE * memory_budget_gib
    kept = checkpointed_activation_gib(config, tokens_per_micro_batch, compiled)
    moved = checkpointed_activation_gib(config, tokens_per_micro_batch, compiled, offloaded=True)
    if state_gib + kept <= room:
        return False, (f"off: with checkpointing, activations ~{kept:.1f} GiB + weights ~{state_gib:.1f} GiB fit in "
                       f"{MEMORY_SHARE:.0%} of the {memory_budget_gib:.0f} GiB budget (activation_offloading: true "
                       f"would keep ~{kept - moved:.1f} GiB of layer inputs in host memory)")
    short = (f"with checkpointing, activations ~{kept:.1f} GiB + weights ~{state_gib:.1f} GiB would exceed "
             f"{MEMORY_SHARE:.0%} of the {memory_budget_gib:.0f} GiB budget")
    if blocker:
        return False, f"off: {short}, but {blocker}"
    fits = "fits" if state_gib + moved <= room else "comes closer"
    return True, f"on: {short}; with the layer inputs in host memory (~{moved:.1f} GiB left on the GPU) it {fits}"


def split_to_fit(config, tokens_per_micro_batch: int, room_gib: float, compiled: bool,
                 recompute_pointwise: bool) -> int | None:
    """The fewest parts (2, 4, 8, ...) a micro-batch splits into for its activations to fit in `room_gib` without
    checkpointing, each part at least SPLIT_FLOOR_TOKENS; None when no such split fits."""
    parts = 2
    while tokens_per_micro_batch // parts >= SPLIT_FLOOR_TOKENS:
        if activation_gib(config, tokens_per_micro_batch // parts, compiled, recompute_pointwise) <= room_gib:
            return parts
        parts *= 2
    return None


# ---------------------------------------------------------------------------------------------------------
# What a LoRA / QLoRA run needs in all (doctor --config and train's start-up print)
# ---------------------------------------------------------------------------------------------------------

def linear_parameters(config, experts_quantized: bool = True) -> int:
    """Parameters of the decoder's linear layers (what bitsandbytes quantises; the output head is not among them),
    and a mixture of experts' routed experts when `experts_quantized` (4 bits: model/moe/quantized.py)."""
    shape = moe.moe_shape(config)
    if shape is not None:
        return moe.linear_parameters(config, shape, experts_quantized)
    return _linear_parameters_of_layers(config)


def lora_parameters(config, rank: int) -> int:
    """LoRA parameters with lora_target: all (every projection of every layer gets r x (in + out); a mixture of
    experts' routed experts one pair per expert and fused projection)."""
    shape = moe.moe_shape(config)
    if shape is not None:
        return moe.lora_parameters(config, shape, rank)
    hidden = config.hidden_size
    return rank * sum((hidden + s.heads * s.head_dim) * 2 + (hidden + s.kv_heads * s.head_dim) * 2
                      + (hidden + s.intermediate) * 3 for s in layer_shapes(config))


def four_bit_experts(quantized_bytes: float | None) -> bool:
    """Whether a base quantised to `quantized_bytes` a weight holds a MoE's routed experts quantised too: 4 bits do
    (model/moe/quantized.py), 8 bits (1 byte) leave them in the load dtype."""
    return quantized_bytes is not None and quantized_bytes < 1.0


def weight_gib(config, quantized_bytes: float | None = None, base_bytes: float = 2.0) -> float:
    """The frozen base: its linear layers at `quantized_bytes` a parameter when quantised (hardware/quantization.py's
    QUANTISED_BYTES), the rest (embeddings, head, norms, routers) at `base_bytes`; a mixture of experts' routed
    experts with the linear layers at 4 bits, at `base_bytes` at 8 (four_bit_experts)."""
    total = estimate_parameters(config)
    linear = linear_parameters(config, four_bit_experts(quantized_bytes)) if quantized_bytes is not None else 0
    return (linear * (quantized_bytes or 0) + (total - linear) * base_bytes) / 2**30


def dequantised_experts_gib(config, compute_bytes: float = 2.0) -> float:
    """A 4-bit MoE's one full-precision expert weight at a time (moe_shape.dequantised_expert_bytes); 0 if dense."""
    shape = moe.moe_shape(config)
    return 0.0 if shape is None else moe.dequantised_expert_bytes(config, shape, compute_bytes) / 2**30


def run_memory_gib(config, tokens: int, rank: int, checkpointing: bool, quantized_bytes: float | None = None,
                   base_bytes: float = 2.0, compiled: bool = False,
                   recompute_pointwise: bool = False, offloaded: bool = False) -> tuple[float, str]:
    """-> (GiB a LoRA run needs at `tokens` a micro-batch, the sum spelled out): base weights, LoRA weights with their
    gradients and AdamW's two moments (fp32: 16 bytes a parameter), activations (with checkpointing: each layer's
    input in bf16 plus one layer's activations being recomputed), and the margin MEMORY_SHARE leaves for the
    allocator, the loss's chunk of logits and the CUDA context. An estimate from the shape, measured against on an
    H200 for bf16 bases (ACTIVATION_SHARE); benchmarks/qlora_bench.py measures the 4-bit side. `offloaded`: the
    layers' inputs wait in host memory (activation_offloading), so only the layer being recomputed counts. A mixture
    of experts on a 4-bit base also holds one expert weight dequantised for its grouped matmul
    (benchmarks/moe_qlora_peak.py measures the 30B-A3B shape)."""
    weights = weight_gib(config, quantized_bytes, base_bytes)
    adapter = lora_parameters(config, rank) * 16 / 2**30
    if checkpointing:
        activations = checkpointed_activation_gib(config, tokens, compiled, offloaded)
    else:
        activations = activation_gib(config, tokens, compiled, recompute_pointwise)
    unpacked = dequantised_experts_gib(config, base_bytes) if four_bit_experts(quantized_bytes) else 0.0
    need = (weights + adapter + activations + unpacked) / MEMORY_SHARE
    lean = ", elementwise results recomputed" if recompute_pointwise and compiled and not checkpointing else ""
    shown = f" + one layer's experts dequantised {unpacked:.2f}" if unpacked else ""
    return need, (f"base weights {weights:.1f} + LoRA with AdamW {adapter:.2f} + activations {activations:.1f} "
                  f"({tokens:,} tokens, checkpointing {'on' if checkpointing else 'off'}{lean}"
                  f"{', layer inputs in host memory' if checkpointing and offloaded else ''}){shown} GiB, over "
                  f"{MEMORY_SHARE:.0%} for the allocator and the loss")
