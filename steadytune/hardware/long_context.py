"""The long-context memory plan: what a micro-batch of one long sequence needs on the GPU (and in host memory) under
each memory lever, the longest cutoff_len each lever fits, and the choice `train` makes (how many layer inputs wait
in host memory). `doctor --config` and the start of `train` print it; benchmarks/gpu_longctx.sh measures it.

The levers, from least to most memory saved:
- gradient checkpointing: each decoder layer keeps its input; one layer's activations are recomputed at a time,
  and the whole sequence's MLP products, fp32 norm copies and attention tensors exist during that recompute;
- sequence tiling (model/tiling.py): the layer, the final norm and the loss a tile of tokens at a time, so the
  recompute holds one tile's working set plus the sequence's keys and values (small under grouped-query attention)
  and three [tokens, hidden] tensors (the incoming gradient, the outgoing one, the layer input);
- activation offloading (model/offload.py): the earliest layers' inputs wait in pinned host memory; as many as the
  GPU needs, no more (each costs a copy out and back over PCIe).

The estimate counts what torch allocates (torch.cuda.max_memory_allocated is what it is checked against): tensors
by their shapes and dtypes, the tile's working set from layer_activation_bytes (an upper bound), and the CUDA context
outside it (CONTEXT_GIB, in the budget only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from steadytune.hardware import moe_shape as moe
from steadytune.hardware.layer_shapes import largest_head_dim
from steadytune.hardware.memory import (
    ACTIVATION_SHARE,
    activation_bytes_per_token,
    layer_activation_bytes,
    lora_parameters,
    weight_gib,
)

GIB = 2**30
# What the GPU holds beside torch's allocations (CUDA context, cuBLAS workspaces) and what the caching allocator
# loses to fragmentation with expandable segments: the plan fits an estimate into BUDGET_SHARE of the memory less
# CONTEXT_GIB.
CONTEXT_GIB = 1.5
BUDGET_SHARE = 0.94
# Pinned host memory the plan may fill with layer inputs: this share of the RAM (the rest: the OS, Python with torch
# and CUDA's libraries, a few GiB; the model is built or loaded straight onto the GPU).
HOST_SHARE = 0.8
# The chunked cross-entropy's logits and their gradient at most (training/loss.CHUNK_LOGITS fp32 values, twice).
LOSS_CHUNK_BYTES = 2 * 4 * 2**27
# Per token, beside the hidden states: input ids, labels, position ids, target index and ids (int64).
INDEX_BYTES = 5 * 8
# The tile the plan assumes (model/tiling.DEFAULT_TILE_TOKENS, train's sequence_tile_tokens default).
DEFAULT_LEVER_TILE = 8192
LEVERS = ("checkpointing", "checkpointing + offloading", "tiling", "tiling + offloading")


@dataclass
class Shape:
    """What the plan reads off a (text) model config."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config) -> "Shape":
        heads = config.num_attention_heads
        head_dim = largest_head_dim(config)
        shape = moe.moe_shape(config)
        inter = shape.dense_width if shape is not None else config.intermediate_size
        return cls(config.hidden_size, config.num_hidden_layers, heads,
                   getattr(config, "num_key_value_heads", None) or heads, head_dim, inter, config.vocab_size)


@dataclass
class Estimate:
    """One lever at one length: GiB on the GPU (peak allocated), GiB of host memory, and the parts."""
    lever: str
    tokens: int
    gpu_gib: float
    host_gib: float = 0.0
    host_layers: int = 0
    parts: dict = field(default_factory=dict)

    def describe(self) -> str:
        parts = " + ".join(f"{name} {gib:.1f}" for name, gib in self.parts.items() if gib >= 0.05)
        host = (f"; {self.host_layers} layer inputs ({self.host_gib:.1f} GiB) in host memory" if self.host_layers
                else "")
        return f"~{self.gpu_gib:.1f} GiB ({parts}){host}"


def _gib(n: float) -> float:
    return n / GIB


# A tile's recompute keeps its activations for its backward (layer_activation_bytes: 313 KB a token at the 7B shape;
# counted on a CPU under bf16 autocast, the tiled layer kept 349 KB a token at 256 tokens, 28 KB of it the math
# attention's scores that flash does not keep) and makes their gradients as the backward walks through them: half
# as much again at the peak (an estimate, checked by benchmarks/gpu_longctx.sh).
TILE_BACKWARD_FACTOR = 1.5


def tile_working_bytes(config, tile: int) -> int:
    """One tile's activations and gradients while it is recomputed and backpropagated (the largest layer's)."""
    return int(TILE_BACKWARD_FACTOR * tile * max(layer_activation_bytes(config)))


def tiled_estimate(config, tokens: int, state_gib: float, tile: int, host_layers: int = 0,
                   act_bytes: int = 2) -> Estimate:
    """Peak GPU memory of a tiled micro-batch of one `tokens`-long row with `host_layers` layer inputs in host
    memory. The larger of two moments (model/tiling.py):
    - the loss's forward: every layer input still on the GPU, the top layer's output and the loss's gradient for it
      ([tokens, hidden] each), one chunk of logits and one tile of the final norm in fp32;
    - the top layer's backward: the layer inputs, one [tokens, hidden] gradient (the layer writes its input's
      gradient into the incoming one), the row's keys and values, their fp32 gradient sums, the last tile's copies
      of them and their gradients, the GQA expansion of one backward kernel call, one tile's working set.
    An offloaded layer's input comes back to the GPU while the one below it is fetched: two of them at a time."""
    s = Shape.of(config)
    x = tokens * s.hidden * act_bytes                     # one layer input (and one [tokens, hidden] gradient)
    kv = tokens * s.kv_heads * s.head_dim                 # elements of k (or v)
    one_head = 2 * tokens * (s.heads // s.kv_heads) * s.head_dim * act_bytes
    expansion = min(s.kv_heads * one_head, max(1 << 30, one_head))
    # an offloaded input comes back while the one below it is fetched ahead: two at a time (one where only one waits)
    inputs = max(s.layers - host_layers, min(host_layers, 2)) * x
    loss = x + LOSS_CHUNK_BYTES + tile * s.hidden * 4 * 3
    layer = kv * (6 * act_bytes + 2 * 4) + expansion + tile_working_bytes(config, tile)
    rotary = 2 * tokens * s.head_dim * act_bytes + tokens * INDEX_BYTES
    parts = {"weights and LoRA state": state_gib, "layer inputs": _gib(inputs), "gradient": _gib(x),
             "rotary tables and indices": _gib(rotary)}
    if loss >= layer:
        parts["loss"] = _gib(loss)
    else:
        parts["one layer's backward"] = _gib(layer)
    return Estimate("tiling + offloading" if host_layers else "tiling", tokens, sum(parts.values()),
                    _gib(host_layers * x), host_layers, parts)


def checkpointed_estimate(config, tokens: int, state_gib: float, host_layers: int = 0,
                          act_bytes: int = 2) -> Estimate:
    """Peak GPU memory with gradient checkpointing and no tiling: the layer inputs (the lowest `host_layers` of them
    in host memory), one layer's activations at the measured share, the final norm's fp32 copies and the loss's
    [tokens, hidden] rows and gradient."""
    s = Shape.of(config)
    x = tokens * s.hidden * act_bytes
    inputs = max(s.layers - host_layers, min(host_layers, 2)) * x
    layer = ACTIVATION_SHARE[False] * max(layer_activation_bytes(config)) * tokens + 2 * x
    head = tokens * s.hidden * (4 * 3 + 2 * act_bytes) + LOSS_CHUNK_BYTES
    parts = {"weights and LoRA state": state_gib, "layer inputs": _gib(inputs), "one layer's recompute": _gib(layer),
             "final norm and loss": _gib(head), "indices": _gib(tokens * INDEX_BYTES)}
    return Estimate("checkpointing + offloading" if host_layers else "checkpointing", tokens, sum(parts.values()),
                    _gib(host_layers * x), host_layers, parts)


def plain_estimate(config, tokens: int, state_gib: float, act_bytes: int = 2) -> Estimate:
    """Peak GPU memory with every activation kept (no checkpointing), at the measured share."""
    s = Shape.of(config)
    head = tokens * s.hidden * (4 * 3 + 2 * act_bytes) + LOSS_CHUNK_BYTES
    parts = {"weights and LoRA state": state_gib,
             "activations": _gib(ACTIVATION_SHARE[False] * activation_bytes_per_token(config) * tokens),
             "final norm and loss": _gib(head)}
    return Estimate("none", tokens, sum(parts.values()), parts=parts)


def room_gib(budget_gib: float) -> float:
    """What the estimate may reach on a GPU of `budget_gib`."""
    return BUDGET_SHARE * budget_gib - CONTEXT_GIB


def host_room_gib(ram_gib: float | None) -> float:
    return HOST_SHARE * ram_gib if ram_gib else 0.0


def fewest_host_layers(config, tokens: int, state_gib: float, budget_gib: float, ram_gib: float | None, tile: int,
                       act_bytes: int = 2, tiled: bool = True) -> Estimate | None:
    """The estimate (tiled, or with checkpointing alone) with the fewest layer inputs in host memory that fits the
    GPU and the host's room; None when no number of them does."""
    layers = Shape.of(config).layers
    x_gib = _gib(tokens * Shape.of(config).hidden * act_bytes)
    for host in range(0, layers + 1):
        if host and host * x_gib > host_room_gib(ram_gib):
            return None
        estimate = (tiled_estimate(config, tokens, state_gib, tile, host, act_bytes) if tiled else
                    checkpointed_estimate(config, tokens, state_gib, host, act_bytes))
        if estimate.gpu_gib <= room_gib(budget_gib):
            return estimate
    return None


def estimate_for(lever: str, config, tokens: int, state_gib: float, budget_gib: float, ram_gib: float | None,
                 tile: int, act_bytes: int = 2) -> Estimate | None:
    """The lever's estimate at `tokens`; None where it cannot fit (offloading that needs more host memory than
    there is, or that no number of host layers makes fit)."""
    if lever == "checkpointing":
        return checkpointed_estimate(config, tokens, state_gib, act_bytes=act_bytes)
    if lever == "checkpointing + offloading":
        return fewest_host_layers(config, tokens, state_gib, budget_gib, ram_gib, tile, act_bytes, tiled=False)
    if lever == "tiling":
        return tiled_estimate(config, tokens, state_gib, tile, 0, act_bytes)
    if lever == "tiling + offloading":
        return fewest_host_layers(config, tokens, state_gib, budget_gib, ram_gib, tile, act_bytes)
    if lever == "none":
        return plain_estimate(config, tokens, state_gib, act_bytes)
    raise ValueError(f"unknown lever {lever!r}")


def longest_context(lever: str, config, state_gib: float, budget_gib: float, ram_gib: float | None, tile: int,
                    act_bytes: int = 2, multiple: int = 1024, ceiling: int = 1 << 26) -> int:
    """The longest sequence (a multiple of `multiple` tokens) whose estimate under `lever` fits; 0 if none does."""
    def fits(tokens: int) -> bool:
        estimate = estimate_for(lever, config, tokens, state_gib, budget_gib, ram_gib, tile, act_bytes)
        return estimate is not None and estimate.gpu_gib <= room_gib(budget_gib)

    low, high = 0, ceiling // multiple
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid * multiple):
            low = mid
        else:
            high = mid - 1
    return low * multiple


def lora_run_state_gib(config, rank: int, quantized_bytes: float | None = None, base_bytes: float = 2.0) -> float:
    """The frozen base (quantised as asked) and LoRA with lora_target: all, its gradients and AdamW's moments."""
    return weight_gib(config, quantized_bytes, base_bytes) + _gib(lora_parameters(config, rank) * 16)


def describe_levers(config, state_gib: float, budget_gib: float, ram_gib: float | None, tile: int,
                    act_bytes: int = 2) -> str:
    """The longest cutoff_len each lever fits, for the plan's printout."""
    out = []
    for lever in LEVERS:
        if "offloading" in lever and not ram_gib:
            continue
        longest = longest_context(lever, config, state_gib, budget_gib, ram_gib, tile, act_bytes)
        out.append(f"{lever} {longest:,}")
    return "; ".join(out)
