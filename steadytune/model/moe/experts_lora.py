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
import torch.nn.functional as F

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
    experts = wrapper.num_experts
    a = wrapper.lora_A[adapter].weight.to(dtype)        # [experts x r, in], expert-major
    b = wrapper.lora_B[adapter].weight.to(dtype)        # [out, r x experts], rank-major: column = rank * experts + e
    rank = a.shape[0] // experts
    a_t = a.view(experts, rank, a.shape[-1]).transpose(1, 2)           # [experts, in, r]
    b_t = b.view(b.shape[0], rank, experts).permute(2, 1, 0)           # [experts, r, out]
    pad = -rank % RANK_MULTIPLE
    if pad:
        a_t = F.pad(a_t, (0, pad))
        b_t = F.pad(b_t, (0, 0, 0, pad))
    return a_t, b_t.contiguous(), wrapper.scaling[adapter]


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


def grouped_experts(experts: torch.nn.Module, hidden: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor, lora: dict, backend: str) -> torch.Tensor:
    """The experts' output [tokens, hidden] for the routed pairs; `lora`: {parameter name: factors or absent}."""
    tokens, top_k = top_k_index.shape
    num_experts = experts.num_experts
    pairs = top_k_index.reshape(-1)
    # A stable sort: the same routing gives the same row order, so the same bits, every run.
    sorted_experts, order = torch.sort(pairs, stable=True)
    ends = group_ends(sorted_experts, num_experts)
    xs = hidden[order // top_k]
    dtype = _compute_dtype(getattr(experts, FUSED_DOWN_NAME), hidden.device.type)
    xs = xs.to(dtype)
    up_name = fused_up_name(experts)
    up = _projection(xs, experts, up_name, lora.get(up_name), ends, backend)
    if experts.has_bias:
        up = up + getattr(experts, f"{up_name}_bias")[sorted_experts].to(up.dtype)
    h = experts._apply_gate(up) if experts.has_gate else experts.act_fn(up)
    down = _projection(h, experts, FUSED_DOWN_NAME, lora.get(FUSED_DOWN_NAME), ends, backend)
    if experts.has_bias:
        down = down + getattr(experts, f"{FUSED_DOWN_NAME}_bias")[sorted_experts].to(down.dtype)
    if getattr(experts, "has_post_expert_norm", False):
        down = experts.post_expert_norm(down)
    down = down * top_k_weights.reshape(-1)[order].unsqueeze(-1).to(down.dtype)
    # Back to (token, k) order, then the sum over each token's experts: a reshape and sum (index_add_ would add in
    # an order that changes from run to run on a GPU).
    unsorted = torch.empty_like(down).index_copy_(0, order, down)
    return unsorted.view(tokens, top_k, -1).sum(dim=1).to(hidden.dtype)


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
