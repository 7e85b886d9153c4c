"""A mixture of experts' shape, read from its config alone (no torch, no weights): which layers route their tokens to
experts, how many experts and how wide, the shared experts and routers beside them; and from it the numbers the memory
policy needs (hardware/memory.py): parameters by kind, LoRA's parameters with every expert adapted, and the bytes a
token keeps for backward in a MoE layer.

The memory of a MoE differs from a dense model's in one way that matters: the weights are all experts' (Qwen3-30B-A3B:
128 experts a layer, 57 of its 61 GB in bf16), while a token's activations are those of the `top_k` experts it is
routed to (its *active* parameters: 8 of 128, 3.3 B of 30.5 B). The dense formula, from `intermediate_size`, gets
both wrong: a Qwen3-MoE config's intermediate_size (6144) is a dense MLP the model does not have in any layer.

Config keys, as transformers' model files read them: experts (num_experts / num_local_experts / n_routed_experts),
top_k (num_experts_per_tok), expert width (moe_intermediate_size, else intermediate_size: Mixtral, gpt-oss), the
dense layers (Qwen-MoE's mlp_only_layers and decoder_sparse_step, DeepSeek's first_k_dense_replace), shared experts
(Qwen2-MoE's shared_expert_intermediate_size with its sigmoid gate, DeepSeek's n_shared_experts x the expert width),
biases (gpt-oss: experts, router and attention), DeepSeek's latent attention (kv_lora_rank, q_lora_rank).
"""

from __future__ import annotations

from dataclasses import dataclass

from steadytune.hardware.layer_shapes import largest_head_dim

# Kinds, spelled as model/moe/anatomy.py's count_by_kind spells them (so a test can hold one against the other).
ATTENTION, DENSE_MLP, SHARED_EXPERT, ROUTED_EXPERTS, ROUTER = (
    "attention", "dense MLP", "shared expert", "routed experts", "router")
EMBEDDINGS, NORMS = "embeddings and head", "norms"

# Bytes an index kept for backward takes (int64): the sort of a token's (token, expert) pairs keeps a few per pair.
_INDEX_BYTES_PER_PAIR = 32


@dataclass(frozen=True)
class MoeShape:
    experts: int            # routed experts in a MoE layer
    top_k: int              # experts a token is routed to
    expert_width: int       # each expert's intermediate size
    moe_layers: int
    dense_layers: int       # layers with a plain MLP of `dense_width` instead
    dense_width: int
    shared_width: int       # the shared experts' total intermediate size (0: none)
    shared_gate: bool       # Qwen2-MoE's sigmoid gate on the shared expert (hidden -> 1)
    gated: bool             # gate and up (SwiGLU) per expert, or up only
    expert_bias: bool       # gpt-oss: biases on the experts and the router


def _first_int(config, *keys) -> int | None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def experts_per_layer(config) -> int | None:
    """Routed experts in each MoE layer, by the names model configs use."""
    return _first_int(config, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def experts_per_token(config) -> int | None:
    return _first_int(config, "num_experts_per_tok", "moe_topk", "top_k", "experts_per_token")


def is_moe_layer(config, index: int) -> bool:
    """Whether decoder layer `index` routes to experts (the rules of transformers' Qwen-MoE and DeepSeek files;
    every layer in the others)."""
    if index in (getattr(config, "mlp_only_layers", None) or ()):
        return False
    step = getattr(config, "decoder_sparse_step", None)
    if isinstance(step, int) and step > 1 and (index + 1) % step:
        return False
    first_dense = getattr(config, "first_k_dense_replace", None)
    return not (isinstance(first_dense, int) and index < first_dense)


def moe_shape(config) -> MoeShape | None:
    """The config's mixture of experts, or None for a dense model."""
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    experts, top_k = experts_per_layer(config), experts_per_token(config)
    if not experts or not top_k:
        return None
    layers = config.num_hidden_layers
    moe_layers = sum(is_moe_layer(config, i) for i in range(layers))
    width = _first_int(config, "moe_intermediate_size") or config.intermediate_size
    shared = _first_int(config, "shared_expert_intermediate_size") or 0
    if not shared and _first_int(config, "n_shared_experts"):
        shared = config.n_shared_experts * width
    model_type = getattr(config, "model_type", "")
    return MoeShape(experts=experts, top_k=top_k, expert_width=width, moe_layers=moe_layers,
                    dense_layers=layers - moe_layers, dense_width=getattr(config, "intermediate_size", width),
                    shared_width=shared, shared_gate=bool(_first_int(config, "shared_expert_intermediate_size")),
                    gated=model_type not in ("nllb_moe", "switch_transformers"), expert_bias=model_type == "gpt_oss")


# --------------------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------------------

def _attention_linears(config) -> list[tuple[int, int]]:
    """(in, out) of each attention projection of one layer: grouped-query attention, or DeepSeek's latent one."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    if getattr(config, "kv_lora_rank", None):   # multi-head latent attention (DeepSeek-V2/V3)
        nope, rope, value = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        q_rank = getattr(config, "q_lora_rank", None)
        query = ([(hidden, q_rank), (q_rank, heads * (nope + rope))] if q_rank else [(hidden, heads * (nope + rope))])
        return query + [(hidden, config.kv_lora_rank + rope), (config.kv_lora_rank, heads * (nope + value)),
                        (heads * value, hidden)]
    head_dim = largest_head_dim(config)
    kv = getattr(config, "num_key_value_heads", None) or heads
    # Qwen3.5 / Qwen3-Next gate each head's output: q_proj writes the query and the gate
    query = heads * head_dim * (2 if config.model_type in GATED_ATTENTION_MODEL_TYPES else 1)
    return [(hidden, query), (hidden, kv * head_dim), (hidden, kv * head_dim), (heads * head_dim, hidden)]


# Model types whose full attention gates its output per head (q_proj twice as wide), beside gated DeltaNet layers.
GATED_ATTENTION_MODEL_TYPES = ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")


def _deltanet_linears(config) -> list[tuple[int, int]]:
    """(in, out) of each projection of one gated DeltaNet (linear-attention) layer: Qwen3.5's separate q/k/v, z, b
    and a projections, or Qwen3-Next's fused qkvz and ba; then the output projection."""
    hidden = config.hidden_size
    keys = config.linear_num_key_heads * config.linear_key_head_dim
    values = config.linear_num_value_heads * config.linear_value_head_dim
    heads = config.linear_num_value_heads
    if config.model_type == "qwen3_next":
        inputs = [(hidden, 2 * keys + 2 * values), (hidden, 2 * heads)]
    else:
        inputs = [(hidden, 2 * keys + values), (hidden, values), (hidden, heads), (hidden, heads)]
    return inputs + [(values, hidden)]


def _deltanet_extras(config) -> int:
    """A gated DeltaNet layer's parameters beside its projections: the depthwise conv over q, k and v, the decay's
    A_log and dt_bias per value head, and the gated norm's weight."""
    conv = (2 * config.linear_num_key_heads * config.linear_key_head_dim
            + config.linear_num_value_heads * config.linear_value_head_dim) * config.linear_conv_kernel_dim
    return conv + 2 * config.linear_num_value_heads + config.linear_value_head_dim


def _layer_kinds(config) -> tuple[int, int]:
    """(full- or sliding-attention layers, gated DeltaNet layers)."""
    linear = sum(1 for t in (getattr(config, "layer_types", None) or []) if t == "linear_attention")
    return config.num_hidden_layers - linear, linear


def _attention_sum(config, per_projection) -> int:
    """per_projection(in, out) summed over every layer's token mixer: attention or gated DeltaNet."""
    full, linear = _layer_kinds(config)
    total = full * sum(per_projection(i, o) for i, o in _attention_linears(config))
    if linear:
        total += linear * sum(per_projection(i, o) for i, o in _deltanet_linears(config))
    return total


def _attention_extras(config) -> int:
    """An attention layer's parameters beside its projections: biases (gpt-oss's on all four, Qwen2-MoE's on q, k,
    v), gpt-oss's sinks, Qwen3's q/k norms, DeepSeek's latent norms."""
    heads = config.num_attention_heads
    extra = 0
    if getattr(config, "attention_bias", False):
        extra += sum(out for _, out in _attention_linears(config))
    elif getattr(config, "qkv_bias", False):   # Qwen2-MoE: q, k and v
        extra += sum(out for _, out in _attention_linears(config)[:3])
    if getattr(config, "model_type", "") == "gpt_oss":
        extra += heads
    if getattr(config, "kv_lora_rank", None):
        extra += config.kv_lora_rank + (getattr(config, "q_lora_rank", None) or 0)
    elif getattr(config, "model_type", "").startswith("qwen3"):
        extra += 2 * largest_head_dim(config)
    return extra


def _mlp(hidden: int, width: int) -> int:
    return 3 * hidden * width


def routed_expert_parameters(config, shape: MoeShape) -> int:
    """One MoE layer's routed experts: gate+up and down per expert (and gpt-oss's biases)."""
    hidden, width = config.hidden_size, shape.expert_width
    per_expert = (2 if shape.gated else 1) * hidden * width + width * hidden
    if shape.expert_bias:
        per_expert += (2 if shape.gated else 1) * width + hidden
    return shape.experts * per_expert


def parameters_by_kind(config, shape: MoeShape) -> dict[str, int]:
    """A MoE decoder's parameters by kind, from its config."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    full, linear = _layer_kinds(config)
    attention = (_attention_sum(config, lambda i, o: i * o) + full * _attention_extras(config)
                 + (linear * _deltanet_extras(config) if linear else 0))
    router = shape.experts * hidden + (shape.experts if shape.expert_bias else 0)
    shared = _mlp(hidden, shape.shared_width)
    if shape.shared_gate:
        router += hidden   # Qwen2-MoE's shared_expert_gate: a router too (anatomy counts it as one)
    tied = getattr(config, "tie_word_embeddings", True)
    return {ATTENTION: attention,
            DENSE_MLP: shape.dense_layers * _mlp(hidden, shape.dense_width),
            SHARED_EXPERT: shape.moe_layers * shared,
            ROUTED_EXPERTS: shape.moe_layers * routed_expert_parameters(config, shape),
            ROUTER: shape.moe_layers * router,
            EMBEDDINGS: config.vocab_size * hidden * (1 if tied else 2),
            NORMS: (2 * layers + 1) * hidden}


def active_parameters(config, shape: MoeShape) -> int:
    """Parameters a token passes through: a routed expert counts top_k of every `experts`."""
    parts = parameters_by_kind(config, shape)
    return sum(parts.values()) - parts[ROUTED_EXPERTS] + parts[ROUTED_EXPERTS] * shape.top_k // shape.experts


def linear_parameters(config, shape: MoeShape, experts_quantized: bool) -> int:
    """What a 4-bit (or 8-bit) base holds quantised: attention, dense and shared MLPs, and the routed experts when
    they are quantised too (4-bit: model/moe/quantized.py; 8-bit leaves them in the load dtype)."""
    parts = parameters_by_kind(config, shape)
    attention = _attention_sum(config, lambda i, o: i * o)
    return (attention + parts[DENSE_MLP] + parts[SHARED_EXPERT]
            + (parts[ROUTED_EXPERTS] if experts_quantized else 0))


def lora_parameters(config, shape: MoeShape, rank: int) -> int:
    """LoRA's parameters with lora_target: all: r x (in + out) for every linear layer but the routers and the head,
    and one pair per routed expert and fused projection (peft's target_parameters)."""
    hidden, width = config.hidden_size, shape.expert_width
    attention = _attention_sum(config, lambda i, o: i + o)
    dense = 3 * (hidden + shape.dense_width)
    shared = 3 * (hidden + shape.shared_width) if shape.shared_width else 0
    routed = shape.experts * ((hidden + (2 if shape.gated else 1) * width) + (width + hidden))
    return rank * (attention + shape.dense_layers * dense
                   + shape.moe_layers * (shared + routed))


# --------------------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------------------

def moe_mlp_bytes_per_token(config, shape: MoeShape) -> int:
    """Bytes one token keeps for backward in a MoE layer's MLP (bf16), the grouped forward's tensors
    (model/moe/experts_lora.py): for each of its top_k (token, expert) rows the gathered input (hidden) and the
    weighted expert output (hidden), gate/up (2 x width), the activation and its product with up (width each), and
    the sort's indices; beside them the shared experts (as a dense MLP) and the router's logits and probabilities
    (fp32)."""
    hidden, width = config.hidden_size, shape.expert_width
    per_row = 2 * (2 * hidden + (4 if shape.gated else 2) * width) + _INDEX_BYTES_PER_PAIR
    return shape.top_k * per_row + 12 * shape.shared_width + 8 * shape.experts


def router_bytes_between_layers(shape: MoeShape) -> int:
    """Bytes a token keeps per MoE layer outside the layers until the loss: its router logits (bf16) and their fp32
    probabilities for the load-balancing loss (model/moe/routing.py)."""
    return 6 * shape.experts


def dequantised_expert_bytes(config, shape: MoeShape, compute_bytes: float = 2.0) -> float:
    """The largest expert weight of one layer dequantised from 4 bits for its grouped matmul (the gate/up one): the
    only full-precision expert weight a 4-bit base ever holds, for the length of one matmul."""
    hidden, width = config.hidden_size, shape.expert_width
    return shape.experts * hidden * width * (2 if shape.gated else 1) * compute_bytes
