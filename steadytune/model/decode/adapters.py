"""Which LoRA adapter a forward uses. A batch whose rows share one adapter runs peft's plain forward with that
adapter active; a batch of base-model rows runs with the adapter layers switched off; only a batch that really
mixes adapters takes peft's mixed-batch forward (`adapter_names`), which splits every LoRA layer's input by adapter
with Python index lists (a host-to-device copy per layer and adapter).

The model's state is changed only when the next forward needs another one, not around every step (peft's
`disable_adapter()` context walks every module on the way in and out).
"""

from __future__ import annotations

from typing import Hashable, Optional, Sequence

import torch

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


class AdapterSelector:
    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.is_peft = hasattr(model, "peft_config")
        # One adapter layer tells whether adapters are on: read from the model each time (classification, tests
        # and peft's own context managers change it too), never remembered.
        self._layer = None
        if self.is_peft:
            from peft.tuners.tuners_utils import BaseTunerLayer
            self._layer = next((m for m in model.modules() if isinstance(m, BaseTunerLayer)), None)

    def arguments(self, adapters: Sequence[Optional[str]]) -> tuple[Optional[Hashable], dict]:
        """Prepare the model for rows using these adapters (None = the base model) -> (key, forward keyword
        arguments). The key names the model state for a recorded step; it is None for a mixed batch, whose
        forward indexes rows on the host and is never recorded."""
        if not self.is_peft:
            return "model", {}
        names = set(adapters)
        if len(names) == 1:
            name = names.pop()
            self.select(name)
            return (name if name is not None else BASE), {}
        self._enable(True)
        return None, {"adapter_names": [a if a is not None else BASE for a in adapters]}

    def current(self) -> Optional[str]:
        """The adapter the model's own forward would apply now: its active one, None with adapters off (peft's
        `disable_adapter()`) or without peft."""
        if not self.is_peft or (self._layer is not None and self._layer.disable_adapters):
            return None
        return self.model.active_adapter

    def select(self, name: Optional[str]) -> None:
        """The model with this adapter alone, or (None) with every adapter layer off."""
        if not self.is_peft:
            return
        if name is None:
            self._enable(False)
            return
        self._enable(True)
        if name != self.model.active_adapter:
            self.model.set_adapter(name)

    def _enable(self, on: bool) -> None:
        if self._layer is None or on == (not self._layer.disable_adapters):
            return  # already so
        if on:
            self.model.base_model.enable_adapter_layers()
        else:
            self.model.base_model.disable_adapter_layers()


def mixes_adapters(model: torch.nn.Module) -> bool:
    """Whether peft's mixed-batch forward (`adapter_names`) can run this model's adapters: not DoRA, and not LoRA on
    a mixture of experts' fused expert weights (peft's ParamWrapper, `target_parameters`, refuses mixed batches).
    Otherwise a batch holds one adapter (or the base model) at a time."""
    configs = getattr(model, "peft_config", {}).values()
    return not any(getattr(c, "use_dora", False) or getattr(c, "target_parameters", None) for c in configs)


def match_model_dtype(model: torch.nn.Module) -> int:
    """Store LoRA A/B weights in the base weights' dtype (bf16/fp16 on a GPU); -> how many tensors were cast.

    peft keeps loaded adapters in fp32 (`autocast_adapter_dtype`), and serving runs under autocast to the base
    dtype, so every LoRA matmul cast its input to fp32 and autocast cast input and weights back down: three extra
    kernels per wrapped layer and step. Under autocast the matmul sees the same low-precision values either way
    (fp32 -> bf16 rounds exactly as storing bf16 does), so the answers do not change. DoRA adapters, whose weight
    norms are computed in the weights' own dtype, stay as they are."""
    if not hasattr(model, "peft_config") or any(getattr(c, "use_dora", False) for c in model.peft_config.values()):
        return 0
    base = {p.dtype for n, p in model.named_parameters() if "lora_" not in n and p.is_floating_point()}
    low = [d for d in (torch.bfloat16, torch.float16) if d in base]
    if not low:
        return 0
    cast = 0
    for module in model.modules():
        for name in ("lora_A", "lora_B"):
            layers = getattr(module, name, None)
            if not isinstance(layers, torch.nn.ModuleDict):
                continue
            for layer in layers.values():
                if isinstance(layer, torch.nn.Linear) and layer.weight.dtype == torch.float32:
                    layer.to(low[0])
                    cast += 1
    return cast
