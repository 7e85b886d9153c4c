"""The routed experts' forward with LoRA, as grouped matmuls (`install_grouped_experts`).

peft adapts a fused expert weight through a parametrization: every forward it builds W + scaling * B @ A for every
expert of the layer (a second copy of the layer's expert weights, 0.8 GB a layer at Qwen3-30B-A3B's widths), then runs
the model's own expert code on it, and its backward produces a gradient the size of all the experts' weights before
contracting it to the LoRA factors. Here the adapter is never folded in: the base and the low-rank path are separate
grouped matmuls over the same sorted rows ("split LoRA"),

    sort the (token, expert) pairs by expert, gather the tokens           xs       [tokens x top_k, hidden]
    up   = xs @ W_up[e]    + scaling * (xs @ A_up[e]^T) @ B_up[e]^T    one grouped matmul for the base, two of rank r
    h    = act(gate) * up  (the model's own gate function)
    down = h  @ W_down[e]  + scaling * (h @ A_down[e]^T) @ B_down[e]^T
    out[token] = sum over its top_k pairs of routing weight x down

so the extra work is rank r wide, and the LoRA gradients are sums over each expert's rows (dA_e = (dmid_e)^T x_e),
never a full-size weight gradient. The values are the parametrized forward's within rounding (tested against a
per-expert loop on a CPU in fp32). The adapter's tensors are peft's own (lora_A [experts x r, in], lora_B
[out, r x experts]): saving, loading, merging and `PeftModel.from_pretrained` see the layers peft made.

The forward is an instance attribute of peft's outermost wrapper of each experts module. Anything else than one
active plain adapter, unmerged (a disabled adapter, a merged one, several), runs peft's own forward.

A 4-bit base (model/moe/quantized.py) keeps each expert weight packed beside a placeholder parameter: the base
projection dequantises it for the length of its grouped matmul (quantized.grouped_4bit), and the experts module itself
gets the same grouped forward without LoRA (`install_four_bit_forward`), which a disabled adapter reaches.
"""

from __future__ import annotations

import types

import torch

from steadytune.errors import UserError
from steadytune.model.lora_scaling import one_plain_adapter
from steadytune.model.moe.anatomy import FUSED_DOWN_NAME, expert_sites, fused_up_name
from steadytune.model.moe.grouped import choose_grouped_backend, group_ends, grouped_mm
from steadytune.model.moe.quantized import FOUR_BIT_FORWARD, four_bit_names, four_bit_weight, grouped_4bit

# torch's grouped matmul takes row strides of 16 bytes: the rank-r factors are padded with zero columns to this many
# (zeros add nothing; their gradients are dropped by the slice).
RANK_MULTIPLE = 16


def param_wrappers(module: torch.nn.Module) -> list:
    """peft's ParamWrappers from the outermost in."""
    chain = []
    while type(module).__name__ == "ParamWrapper":
        chain.append(module)
        module = module.base_layer
    return chain


def _compute_dtype(weight: torch.Tensor, device_type: str) -> torch.dtype:
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


def low_rank_factors(wrapper, adapter: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, float]:
    """peft's side-by-side factors as grouped-matmul operands: (A^T [experts, in, r'], B^T [experts, r', out],
    scaling), r' the rank padded to RANK_MULTIPLE."""
    a = wrapper.lora_A[adapter].weight.to(dtype)        # [experts x r, in], expert-major
    b = wrapper.lora_B[adapter].weight.to(dtype)        # [out, r x experts], rank-major: column = rank * experts + e
    a_t, b_t = torch.ops.steadytune.expert_lora_factors(a, b, wrapper.num_experts)
    return a_t, b_t, wrapper.scaling[adapter]


# The factors' new layout as one custom op: its outputs are plain contiguous tensors whatever the compiler would
# otherwise make of a permute + pad + contiguous (Inductor kept B's permuted strides, which torch's grouped matmul
# refuses: "Invalid strides/sizes", seen on the H200), and its backward takes gradients in any layout.
@torch.library.custom_op("steadytune::expert_lora_factors", mutates_args=())
def expert_lora_factors(a: torch.Tensor, b: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    rank = a.shape[0] // experts
    padded = rank + (-rank % RANK_MULTIPLE)
    a_t = a.new_zeros(experts, a.shape[1], padded)
    b_t = b.new_zeros(experts, padded, b.shape[0])
    a_t[:, :, :rank] = a.view(experts, rank, a.shape[1]).transpose(1, 2)
    b_t[:, :rank, :] = b.view(b.shape[0], rank, experts).permute(2, 1, 0)
    return a_t, b_t


@expert_lora_factors.register_fake
def _(a, b, experts):
    rank = a.shape[0] // experts
    padded = rank + (-rank % RANK_MULTIPLE)
    return a.new_empty(experts, a.shape[1], padded), b.new_empty(experts, padded, b.shape[0])


def _factors_setup(ctx, inputs, output):
    a, b, experts = inputs
    ctx.experts, ctx.rank = experts, a.shape[0] // experts


def _factors_backward(ctx, grad_a_t, grad_b_t):
    experts, rank = ctx.experts, ctx.rank
    grad_a = grad_b = None
    if grad_a_t is not None:
        grad_a = grad_a_t[:, :, :rank].transpose(1, 2).reshape(experts * rank, grad_a_t.shape[1])
    if grad_b_t is not None:
        grad_b = grad_b_t[:, :rank, :].permute(2, 1, 0).reshape(grad_b_t.shape[2], rank * experts)
    return grad_a, grad_b, None


expert_lora_factors.register_autograd(_factors_backward, setup_context=_factors_setup)


def _projection(x: torch.Tensor, experts: torch.nn.Module, name: str, lora, ends: torch.Tensor,
                backend: str) -> torch.Tensor:
    """x @ W[e] (+ the LoRA path) over rows sorted by expert; W is `experts.<name>`, stored [experts, out, in] unless
    the module is transposed, or its 4-bit copy (dequantised for this matmul only)."""
    packed = four_bit_weight(experts, name)
    if packed is not None:
        out = grouped_4bit(x, packed, experts.is_transposed, ends, backend)
    else:
        weight = getattr(experts, name)
        w = weight.to(x.dtype) if weight.dtype != x.dtype else weight
        out = grouped_mm(x, w if experts.is_transposed else w.transpose(-2, -1), ends, backend)
    if lora is not None:
        a_t, b_t, scaling = lora
        out = out + grouped_mm(grouped_mm(x, a_t, ends, backend) * scaling, b_t, ends, backend)
    return out


# Each expert's rows start at a multiple of this many rows (16 bytes of bf16): torch's CUDA grouped matmul asserts
# that every group's size along the dimension it splits is a multiple of 16 bytes wherever that dimension is the
# contiguous one, which the compiler's layouts and the weight gradients make it (a device-side assert on the H200).
GROUP_ROWS = 8


def padded_rows(pairs: int, num_experts: int) -> int:
    """Rows of the padded layout: every pair, each expert's slack up to a multiple of GROUP_ROWS, rounded up. Fixed by
    the number of pairs alone, so a static shape stays static."""
    total = pairs + num_experts * (GROUP_ROWS - 1)
    return total + (-total % GROUP_ROWS)


def padded_layout(sorted_experts: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """-> (each sorted pair's row in the padded layout, the groups' end rows as int32 offsets, the layout's rows).
    Each expert's group starts at a multiple of GROUP_ROWS; the last group runs to the end, so no row lies past the
    groups (torch's kernel leaves such rows unwritten). All on the device: no host sync."""
    pairs = sorted_experts.shape[0]
    rows = padded_rows(pairs, num_experts)
    ends = group_ends(sorted_experts, num_experts).to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    padded = (counts + GROUP_ROWS - 1) // GROUP_ROWS * GROUP_ROWS
    padded_ends = torch.cumsum(padded, 0)
    padded_starts = padded_ends - padded
    padded_ends[-1] = rows
    positions = torch.arange(pairs, device=sorted_experts.device)
    dest = padded_starts[sorted_experts] + positions - (ends - counts)[sorted_experts]
    return dest, padded_ends.to(torch.int32), rows


def grouped_experts(experts: torch.nn.Module, hidden: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor, lora: dict, backend: str) -> torch.Tensor:
    """The experts' output [tokens, hidden] for the routed pairs; `lora`: {parameter name: factors or absent}."""
    tokens, top_k = top_k_index.shape
    num_experts = experts.num_experts
    pairs = top_k_index.reshape(-1)
    # A stable sort: the same routing gives the same row order, so the same bits, every run.
    sorted_experts, order = torch.sort(pairs, stable=True)
    dest, ends, rows = padded_layout(sorted_experts, num_experts)
    # Row r of the layout holds token source[r]; the padding rows read an extra zero row.
    source = torch.full((rows,), tokens, dtype=torch.long, device=hidden.device)
    source[dest] = order // top_k
    dtype = _compute_dtype(getattr(experts, FUSED_DOWN_NAME), hidden.device.type)
    xs = torch.cat([hidden, hidden.new_zeros(1, hidden.shape[-1])]).to(dtype)[source]
    row_experts = None
    if experts.has_bias:   # each row's expert, padding rows their group's
        row_experts = torch.searchsorted(ends.to(torch.int64), torch.arange(rows, device=hidden.device), right=True)
        row_experts = row_experts.clamp(max=num_experts - 1)
    up_name = fused_up_name(experts)
    up = _projection(xs, experts, up_name, lora.get(up_name), ends, backend)
    if row_experts is not None:
        up = up + getattr(experts, f"{up_name}_bias")[row_experts].to(up.dtype)
    h = experts._apply_gate(up) if experts.has_gate else experts.act_fn(up)
    down = _projection(h, experts, FUSED_DOWN_NAME, lora.get(FUSED_DOWN_NAME), ends, backend)
    if row_experts is not None:
        down = down + getattr(experts, f"{FUSED_DOWN_NAME}_bias")[row_experts].to(down.dtype)
    if getattr(experts, "has_post_expert_norm", False):
        down = experts.post_expert_norm(down)
    # Back to (token, k) order: pair p = order[i] sits at row dest[i]; then the weighted sum over each token's experts
    # (a reshape and sum: index_add_ would add in an order that changes from run to run on a GPU).
    row_of_pair = torch.empty_like(dest).index_copy_(0, order, dest)
    weighted = down[row_of_pair] * top_k_weights.reshape(-1, 1).to(down.dtype)
    return weighted.view(tokens, top_k, -1).sum(dim=1).to(hidden.dtype)


def supported(experts: torch.nn.Module) -> bool:
    """The transformers 5 experts this forward computes: their use_experts_implementation flags, gated or not,
    concatenated or interleaved (through the module's own _apply_gate), with or without bias."""
    return all(hasattr(experts, flag) for flag in ("has_gate", "has_bias", "is_transposed")) and (
        not experts.has_gate or hasattr(experts, "_apply_gate"))


def _routing_arguments(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(top_k_index, top_k_weights) as the MoE block passes them: positionally, or by the names transformers' model
    files use."""
    values = list(args) + [v for k, v in kwargs.items() if k in ("top_k_index", "router_indices", "selected_experts",
                                                                  "top_k_weights", "routing_weights")]
    if len(values) != 2:
        raise TypeError(f"experts forward: expected the routing indices and weights, got {len(args)} positional and "
                        f"{sorted(kwargs)} keyword arguments")
    return values[0], values[1]


def grouped_lora_forward(self, hidden: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The outermost ParamWrapper's forward: grouped matmuls with the LoRA path kept apart (see the module doc)."""
    chain = param_wrappers(self)
    experts = chain[-1].base_layer
    if (any(w.disable_adapters or w.merged for w in chain) or kwargs.get("adapter_names") is not None
            or not one_plain_adapter(chain)):
        if four_bit_names(experts) and not any(w.disable_adapters for w in chain):
            # peft's forward would fold the adapter into the placeholder, which the 4-bit forward does not read
            raise UserError("4-bit routed experts (quantization_bit: 4) take one plain adapter at a time, unmerged; "
                            "to merge, or to mix adapters, load the base without quantization_bit")
        return type(self).forward(self, hidden, *args, **kwargs)
    adapter = chain[0].active_adapters[0]
    top_k_index, top_k_weights = _routing_arguments(args, kwargs)
    dtype = _compute_dtype(getattr(experts, FUSED_DOWN_NAME), hidden.device.type)
    lora = {w.parameter_name: low_rank_factors(w, adapter, dtype) for w in chain}
    backend = backend_for(hidden.device, dtype, self.grouped_backend)
    return grouped_experts(experts, hidden, top_k_index, top_k_weights, lora, backend)


_BACKENDS: dict = {}


def backend_for(device: torch.device, dtype: torch.dtype, asked: str) -> str:
    """The grouped backend for this device and dtype (grouped.choose_grouped_backend), chosen once per kind."""
    key = (device.type, device.index, dtype, asked)
    if key not in _BACKENDS:
        _BACKENDS[key] = choose_grouped_backend(device, dtype, asked)[0]
    return _BACKENDS[key]


def install_grouped_experts(model: torch.nn.Module, backend: str = "auto") -> int:
    """Give each LoRA-adapted fused experts module of `model` the grouped forward; -> how many. `backend`: the
    moe_grouped_mm key (auto: chosen per device and dtype at the first forward). Instance attributes, not new classes:
    peft's saving, merging and isinstance checks see the layers they made."""
    installed = 0
    for site in expert_sites(model):
        if param_wrappers(site.module) and supported(site.experts):
            site.module.grouped_backend = backend
            site.module.forward = types.MethodType(grouped_lora_forward, site.module)
            installed += 1
    return installed


def four_bit_base_forward(self, hidden: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """A 4-bit experts module's own forward: the grouped matmuls of the base, without LoRA (the transformers forward
    would read the placeholder parameters)."""
    top_k_index, top_k_weights = _routing_arguments(args, kwargs)
    dtype = _compute_dtype(getattr(self, FUSED_DOWN_NAME), hidden.device.type)
    return grouped_experts(self, hidden, top_k_index, top_k_weights, {}, backend_for(hidden.device, dtype, "auto"))


setattr(four_bit_base_forward, FOUR_BIT_FORWARD, True)


def install_four_bit_forward(experts: torch.nn.Module) -> None:
    """The grouped forward without LoRA on an experts module whose weights are 4-bit (quantized.py)."""
    experts.forward = types.MethodType(four_bit_base_forward, experts)


def is_grouped(module: torch.nn.Module) -> bool:
    forward = vars(module).get("forward")
    return getattr(forward, "__func__", None) is grouped_lora_forward
