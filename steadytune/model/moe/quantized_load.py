"""Loading a mixture of experts with 4-bit routed experts (quantized.py says what they are).

transformers' bitsandbytes quantizer quantises each nn.Linear as it loads (one weight at a time: on-the-fly
quantisation loads synchronously, so full-precision tensors never pile up on the device), and loads every other
weight as it is. Here the same quantizer also takes the fused expert weights: `param_needs_quantization` says yes to
them, and the quantisation op packs each into 4 bits the moment it is materialised on the device (for a checkpoint
that stores experts one by one, right after transformers' conversion stacks them into the fused tensor), leaving the
placeholder parameter. The peak while loading is the quantised model plus one layer's fused projection in bf16
(0.8 GB at Qwen3-30B-A3B's widths), not the 57 GB of its bf16 experts. transformers' caching-allocator warm-up sizes
itself with the same answer (0.5 bytes a quantised weight).

transformers picks the quantizer class from a table by the config's method (bitsandbytes_4bit); `four_bit_experts_
loading` puts the subclass there for the length of one from_pretrained call. Everything else (the linear layers, the
model's is_loaded_in_4bit, dequantize) stays transformers' own.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from steadytune.errors import UserError
from steadytune.model.moe.anatomy import FUSED_DOWN_NAME, FUSED_UP_NAMES, expert_sites, is_fused_experts
from steadytune.model.moe.experts_lora import install_four_bit_forward, supported
from steadytune.model.moe.quantized import four_bit_names, quantize_experts, quantize_parameter

_QUANTIZER_KEY = "bitsandbytes_4bit"


def _expert_weight(model: nn.Module, name: str) -> tuple[nn.Module, str] | None:
    """(the experts module, the weight's name) when `name` is a fused expert weight this forward computes."""
    module_name, _, leaf = name.rpartition(".")
    if leaf not in FUSED_UP_NAMES + (FUSED_DOWN_NAME,):
        return None
    try:
        module = model.get_submodule(module_name)
    except AttributeError:
        return None
    return (module, leaf) if is_fused_experts(module) and supported(module) else None


def _quantizer_class():
    """transformers' 4-bit bitsandbytes quantizer, extended to the fused expert weights."""
    from transformers.integrations.bitsandbytes import Bnb4bitQuantize  # lazy: the optional qlora path only
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer

    class ExpertsQuantize(Bnb4bitQuantize):
        """bitsandbytes' own op for linear weights; the fused expert weights packed by quantized.py."""

        def convert(self, input_dict, full_layer_name=None, model=None, **kwargs):
            config = self.hf_quantizer.quantization_config
            result, linear = {}, {}
            for name, value in input_dict.items():
                found = _expert_weight(model, name)
                if found is None:
                    linear[name] = value
                    continue
                experts, leaf = found
                value = value[0] if isinstance(value, list) else value
                result[name] = quantize_parameter(experts, leaf, value, config.bnb_4bit_quant_type,
                                                  config.bnb_4bit_use_double_quant)
                install_four_bit_forward(experts)
                experts._is_hf_initialized = True
            if linear:
                result.update(super().convert(linear, full_layer_name=full_layer_name, model=model, **kwargs))
            return result

    class ExpertsBnb4BitHfQuantizer(Bnb4BitHfQuantizer):
        def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
            return super().param_needs_quantization(model, param_name, **kwargs) or (
                not self.pre_quantized and _expert_weight(model, param_name) is not None)

        def get_quantize_ops(self):
            return ExpertsQuantize(self)

    return ExpertsBnb4BitHfQuantizer


@contextlib.contextmanager
def four_bit_experts_loading(quantization_bit: int | None):
    """While a 4-bit base loads: its fused expert weights are quantised too (module docstring)."""
    if quantization_bit != 4:
        yield
        return
    from transformers.quantizers import auto  # lazy: the optional qlora path only

    plain = auto.AUTO_QUANTIZER_MAPPING[_QUANTIZER_KEY]
    auto.AUTO_QUANTIZER_MAPPING[_QUANTIZER_KEY] = _quantizer_class()
    try:
        yield
    finally:
        auto.AUTO_QUANTIZER_MAPPING[_QUANTIZER_KEY] = plain


def check_four_bit_experts(model: nn.Module) -> tuple[int, int]:
    """After a 4-bit load: every fused experts module this forward computes holds 4-bit weights (a failed conversion
    would leave a placeholder-free bf16 weight, or none); -> (layers, 4-bit weights)."""
    layers = weights = 0
    for site in expert_sites(model):
        if not supported(site.experts):
            continue
        names = four_bit_names(site.experts)
        wanted = [n for n in FUSED_UP_NAMES + (FUSED_DOWN_NAME,) if isinstance(getattr(site.experts, n, None),
                                                                              nn.Parameter)]
        if sorted(names) != sorted(wanted):
            raise UserError(f"quantization_bit: 4: the routed experts of {site.name} did not load as 4-bit weights "
                            f"({', '.join(sorted(set(wanted) - set(names)))} missing); transformers' loading report "
                            "above says why")
        layers, weights = layers + 1, weights + len(names)
    return layers, weights


def quantize_loaded_experts(model: nn.Module, quant_type: str, double_quantization: bool) -> int:
    """The fused expert weights of a model already in memory, quantised in place, one weight at a time (a model
    built from config, or loaded in bf16); -> layers quantised."""
    done = 0
    for site in expert_sites(model):
        experts = site.experts
        if not supported(experts) or four_bit_names(experts):
            continue
        names = [n for n in FUSED_UP_NAMES + (FUSED_DOWN_NAME,) if isinstance(getattr(experts, n, None),
                                                                             nn.Parameter)]
        quantize_experts(experts, names, quant_type, double_quantization)
        install_four_bit_forward(experts)
        done += 1
    return done


def build_four_bit_model(config, device: torch.device, dtype: torch.dtype, quant_type: str = "nf4",
                         double_quantization: bool = True, attn_implementation: str = "sdpa", seed: int = 0):
    """A causal LM of `config` with random weights, built straight into a 4-bit base as `train` loads one with
    quantization_bit: 4: every nn.Linear but the output head as bitsandbytes' Linear4bit, the fused routed experts as
    FourBitWeight, the rest in `dtype`. Module by module on `device` (created on the meta device, each module given
    memory, initialised as transformers initialises it, and quantised before the next): a 30B-A3B shape never holds
    more than one layer's experts in bf16 (benchmarks/moe_qlora_peak.py; no 61 GB folder to write and read)."""
    import bitsandbytes as bnb  # lazy: the optional qlora dependency
    from transformers import AutoModelForCausalLM

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:   # as a loaded model names it (Accelerate compares the two)
        device = torch.device("cuda", torch.cuda.current_device())
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    head = model.get_output_embeddings()
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, module in list(model.named_modules()):
            if not any(t.is_meta for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]):
                continue
            module.to_empty(device=device, recurse=False)
            model._init_weights(module)
            if is_fused_experts(module) and supported(module):
                names = [n for n in FUSED_UP_NAMES + (FUSED_DOWN_NAME,)
                         if isinstance(getattr(module, n, None), nn.Parameter)]
                quantize_experts(module, names, quant_type, double_quantization)
                install_four_bit_forward(module)
            elif type(module) is nn.Linear and module is not head:
                parent_name, _, leaf = name.rpartition(".")
                setattr(model.get_submodule(parent_name), leaf,
                        _linear_4bit(bnb, module, dtype, quant_type, double_quantization))
    model.tie_weights()
    model.is_loaded_in_4bit = True
    model.hf_device_map = {"": device}
    return model.eval()


def _linear_4bit(bnb, linear: nn.Linear, dtype: torch.dtype, quant_type: str, double_quantization: bool):
    """`linear` as bitsandbytes' Linear4bit, its weight quantised where it is (as transformers' quantizer does)."""
    layer = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                              compute_dtype=dtype, compress_statistics=double_quantization, quant_type=quant_type,
                              quant_storage=torch.uint8, device="meta")
    layer.weight = bnb.nn.Params4bit(linear.weight.data, requires_grad=False, compress_statistics=double_quantization,
                                     quant_type=quant_type, quant_storage=torch.uint8,
                                     module=layer).to(linear.weight.device)
    if linear.bias is not None:
        layer.bias = nn.Parameter(linear.bias.data, requires_grad=False)
    return layer
