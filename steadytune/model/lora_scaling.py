"""LoRA's scaling applied to the rank-r tensor instead of the full-width output (`scale_before_lora_b`).

peft computes a LoRA layer as `base(x) + lora_B(lora_A(x)) * scaling`. The scaling then multiplies a full-width
tensor, [tokens, out_features], and in the backward so does its gradient: the incoming gradient g is needed once
as it is (for the base's input gradient) and once scaled (for both of lora_B's matmuls), so the compiled backward
writes both, one more [tokens, out_features] tensor per adapted layer a step (seen in Inductor's output: two
full-width buffers from the kernel before, against one). `lora_B(lora_A(x) * scaling)` is the same product with the
scaling on [tokens, r]: the backward scales only r columns.

The values: with the default lora_alpha = 2 x rank the scaling is 2, a power of two, and both orders give the same
bits; another scaling (rslora, a chosen alpha) rounds once at a different place, within the compute dtype's rounding.
Only vanilla LoRA layers in the ordinary case take the new order; a merged or disabled adapter, a mixed batch of
adapters, DoRA and the other peft variants run peft's own forward, unchanged.
"""

from __future__ import annotations

import types

import torch

# peft's keyword arguments that select its variants' paths (lora/layer.py VARIANT_KWARG_KEYS, and mixed batches)
PEFT_ROUTING_KWARGS = ("adapter_names", "alora_offsets")


def one_plain_adapter(layers) -> bool:
    """Whether peft's LoRA layers all run the same one active adapter, in its plain form: present in each, no variant
    (DoRA ...), no dropout. What the grouped and fused forwards (shared_input, fused_swiglu) compute for them."""
    active = list(layers[0].active_adapters)
    if len(active) != 1 or any(list(layer.active_adapters) != active for layer in layers):
        return False
    name = active[0]
    return all(name in layer.lora_A and name not in layer.lora_variant
               and isinstance(layer.lora_dropout[name], torch.nn.Identity) for layer in layers)


def scaled_first_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    peft_forward = type(self).forward
    if (self.disable_adapters or self.merged or any(kwargs.get(k) is not None for k in PEFT_ROUTING_KWARGS)
            or any(name in self.lora_variant for name in self.active_adapters)):
        return peft_forward(self, x, *args, **kwargs)
    for key in PEFT_ROUTING_KWARGS:
        kwargs.pop(key, None)
    self._check_forward_args(x, *args, **kwargs)
    result = self.base_layer(x, *args, **kwargs)
    result_dtype = result.dtype
    for name in self.active_adapters:
        if name not in self.lora_A:
            continue
        lora_input = self._cast_input_dtype(x, self.lora_A[name].weight.dtype)
        low_rank = self.lora_A[name](self.lora_dropout[name](lora_input)) * self.scaling[name]
        result = result + self.lora_B[name](low_rank)
    return result.to(result_dtype)


def scale_before_lora_b(model: torch.nn.Module) -> tuple[int, str]:
    """Give each peft LoRA Linear layer of `model` the scaled-first forward; -> (layers changed, reason).

    An instance attribute, not a new class: peft's isinstance checks, adapter saving, merging and export see the
    layer they made."""
    from peft.tuners.lora import Linear as LoraLinear   # lazy: peft is imported where adapters are used

    changed = 0
    for module in model.modules():
        if type(module) is LoraLinear and "forward" not in vars(module):
            module.forward = types.MethodType(scaled_first_forward, module)
            changed += 1
    return changed, (f"LoRA's scaling multiplies the rank-r tensor before lora_B ({changed} layers): one full-width "
                     f"gradient tensor less to write per layer a step; the same values")
