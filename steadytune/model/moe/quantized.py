"""4-bit routed experts: QLoRA for a mixture of experts.

transformers 5 keeps a MoE layer's routed experts as two fused 3-D parameters (`gate_up_proj` [experts, 2 x
intermediate, hidden], `down_proj` [experts, hidden, intermediate]), which bitsandbytes' quantizer leaves alone: it
converts nn.Linear layers only. In a Qwen3-30B-A3B those two tensors per layer are 57 of its 61 GB in bf16, so a 4-bit
base that quantises only the linear layers still needs a 64 GB card. Here, with `quantization_bit: 4`, each fused
expert weight is quantised too, with bitsandbytes' own blockwise 4-bit format (`quantize_4bit`: blocks of 64, nf4 or
fp4, double quantisation of the block scales as `double_quantization` says: the numbers its Linear4bit layers hold):

- the packed bytes and their statistics are frozen buffers of a small module beside the weight (`FourBitWeight`,
  `experts.gate_up_proj_4bit`), so `.to(device)` moves them and nothing trains them;
- the parameter itself stays, as a placeholder of the weight's shape, dtype and device that holds one element (a
  zero-stride view of a NaN): peft reads its shape to size each expert's LoRA pair (the adapter files stay peft's
  standard ones), the parameter counts by kind still count every expert, and a path that would multiply by the
  placeholder instead of the 4-bit weight computes NaN, never a plausible wrong number;
- the grouped forward (experts_lora.grouped_experts) dequantises one projection of one layer into the compute dtype
  right before its grouped matmul, inside an autograd function that keeps nothing of it for backward and dequantises
  again there: only one layer's expert weights ever exist in bf16, and only for the length of one matmul.

Loading quantises each expert weight as it reaches the device (model/moe/quantized_load.py), so the bf16 experts are
never all on the GPU at once. A merge (export) dequantises them back into plain parameters first (`dequantize_experts`,
called by model/quantize.dequantize_base), as a dense QLoRA base's linear layers are.
"""

from __future__ import annotations

import torch
from torch import nn

from steadytune.model.moe.grouped import grouped_mm

SUFFIX = "_4bit"       # experts.gate_up_proj -> experts.gate_up_proj_4bit
# Marks the forward experts_lora installs on a 4-bit experts module (its base forward without LoRA).
FOUR_BIT_FORWARD = "four_bit_base_forward"
BLOCKSIZE = 64         # bitsandbytes' Linear4bit default (and its only size on ROCm's wave64 GPUs before 0.49.2)


class FourBitWeight(nn.Module):
    """One fused expert weight in bitsandbytes' 4-bit layout: the packed bytes, the block scales (absmax) and the
    quantisation code as buffers, with the nested scales of double quantisation; `dequantize(dtype)` gives the
    weight back in its original shape."""

    def __init__(self, packed: torch.Tensor, state):
        super().__init__()
        self.register_buffer("packed", packed)
        self.register_buffer("absmax", state.absmax)
        self.register_buffer("code", state.code)
        self.shape = tuple(state.shape)
        self.blocksize, self.quant_type, self.nested = state.blocksize, state.quant_type, state.nested
        if state.nested:
            self.register_buffer("nested_absmax", state.state2.absmax)
            self.register_buffer("nested_code", state.state2.code)
            self.register_buffer("offset", torch.as_tensor(state.offset, dtype=torch.float32).reshape(()))
            self.nested_blocksize = state.state2.blocksize

    def quant_state(self, dtype: torch.dtype):
        from bitsandbytes.functional import QuantState  # lazy: bitsandbytes is the optional qlora dependency

        nested = (QuantState(absmax=self.nested_absmax, code=self.nested_code, blocksize=self.nested_blocksize,
                             dtype=torch.float32) if self.nested else None)
        return QuantState(absmax=self.absmax, shape=torch.Size(self.shape), code=self.code, blocksize=self.blocksize,
                          quant_type=self.quant_type, dtype=dtype, offset=self.offset if self.nested else None,
                          state2=nested)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        from bitsandbytes.functional import dequantize_4bit  # lazy: bitsandbytes is the optional qlora dependency

        return dequantize_4bit(self.packed, self.quant_state(dtype))

    def extra_repr(self) -> str:
        return f"shape={list(self.shape)}, {self.quant_type}, blocksize={self.blocksize}, double={self.nested}"


def quantize_weight(weight: torch.Tensor, quant_type: str, double_quantization: bool) -> FourBitWeight:
    """A weight (any shape, on its device) as bitsandbytes' blockwise 4-bit numbers."""
    from bitsandbytes.functional import quantize_4bit  # lazy: bitsandbytes is the optional qlora dependency

    packed, state = quantize_4bit(weight.detach().contiguous(), blocksize=BLOCKSIZE,
                                  compress_statistics=double_quantization, quant_type=quant_type,
                                  quant_storage=torch.uint8)
    return FourBitWeight(packed, state)


def placeholder(like: torch.Tensor) -> nn.Parameter:
    """A frozen parameter with `like`'s shape, dtype and device that holds one element, NaN (module docstring)."""
    one = torch.full((), float("nan"), dtype=like.dtype, device=like.device)
    return nn.Parameter(one.expand(like.shape), requires_grad=False)


def is_placeholder(tensor: torch.Tensor) -> bool:
    return tensor.dim() > 0 and tensor.numel() > 1 and all(s == 0 for s in tensor.stride())


def four_bit_weight(experts: nn.Module, name: str) -> FourBitWeight | None:
    """The 4-bit copy of `experts.<name>`, or None where the weight is a plain parameter."""
    found = experts._modules.get(name + SUFFIX)
    return found if isinstance(found, FourBitWeight) else None


def four_bit_names(experts: nn.Module) -> list[str]:
    return [name[:-len(SUFFIX)] for name, module in experts.named_children() if isinstance(module, FourBitWeight)]


def quantize_parameter(experts: nn.Module, name: str, value: torch.Tensor, quant_type: str,
                       double_quantization: bool) -> nn.Parameter:
    """Quantise `value` (the weight `experts.<name>` is to hold) beside the module; -> the placeholder parameter."""
    experts.add_module(name + SUFFIX, quantize_weight(value, quant_type, double_quantization))
    return placeholder(value)


def quantize_experts(experts: nn.Module, names: list[str], quant_type: str, double_quantization: bool) -> None:
    """Quantise the fused expert weights `names` of a module already loaded (one at a time, each freed after)."""
    for name in names:
        value = getattr(experts, name)
        setattr(experts, name, quantize_parameter(experts, name, value.data, quant_type, double_quantization))
        del value


def dequantize_experts(model: nn.Module, dtype: torch.dtype) -> int:
    """Every 4-bit expert weight of `model` back into a plain parameter in `dtype` (for a merge); -> how many."""
    done = 0
    for module in list(model.modules()):
        names = four_bit_names(module)
        for name in names:
            weight = four_bit_weight(module, name).dequantize(dtype)
            delattr(module, name + SUFFIX)
            setattr(module, name, nn.Parameter(weight, requires_grad=False))
            done += 1
        forward = vars(module).get("forward")
        if names and getattr(getattr(forward, "__func__", None), FOUR_BIT_FORWARD, False):
            del module.forward   # the class's own forward reads the plain parameters again
    return done


def four_bit_bytes(model: nn.Module) -> int:
    """Bytes the 4-bit expert weights hold (packed values and their statistics)."""
    return sum(b.numel() * b.element_size() for m in model.modules() if isinstance(m, FourBitWeight)
               for b in m.buffers())


class _FourBitGroupedMM(torch.autograd.Function):
    """x @ W[e] over rows sorted by expert, W dequantised from 4 bits for the forward and again for the backward;
    nothing of W is kept between them (the weight is frozen: no gradient for it, and x need not be saved)."""

    @staticmethod
    def forward(ctx, x, offsets, weight: FourBitWeight, transposed: bool, backend: str):
        w = weight.dequantize(x.dtype)                    # [experts, out, in], or [experts, in, out] when transposed
        out = grouped_mm(x, w if transposed else w.transpose(-2, -1), offsets, backend)
        del w
        ctx.save_for_backward(offsets)
        ctx.weight, ctx.transposed, ctx.backend = weight, transposed, backend
        return out

    @staticmethod
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        w = ctx.weight.dequantize(grad.dtype)
        grad_x = grouped_mm(grad.contiguous(), w.transpose(-2, -1) if ctx.transposed else w, offsets, ctx.backend)
        return grad_x, None, None, None, None


def grouped_4bit(x: torch.Tensor, weight: FourBitWeight, transposed: bool, offsets: torch.Tensor,
                 backend: str) -> torch.Tensor:
    """The base projection of rows sorted by expert through a 4-bit expert weight (experts_lora._projection)."""
    return _FourBitGroupedMM.apply(x, offsets, weight, transposed, backend)
