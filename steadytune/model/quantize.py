"""A quantised base (QLoRA): loading it through transformers' BitsAndBytesConfig, what stays in higher precision,
and dequantising it again for a merge.

What is quantised: every linear layer of the decoder (attention and MLP projections): transformers' bitsandbytes
quantizer converts each nn.Linear except the output head (its default skip list), and the embeddings are no Linear.
With 4 bits, a mixture of experts' routed experts too (transformers 5's fused 3-D expert weights, no Linear:
model/moe/quantized.py quantises them to the same format as they load). What stays in higher precision, in the
dtype the base loads in (the run's compute dtype: bf16 on a bf16 GPU, fp32 on a CPU): the embeddings, the output head,
every norm and bias (and a MoE's routers). LoRA's own A/B weights are fp32 (model/lora.py), as in every LoRA run.

Decided against peft's `prepare_model_for_kbit_training`: it casts every weight that is not quantised to fp32. For a
Qwen2.5-7B shape that is the embeddings and the untied head, 1.09 B parameters: +2.0 GiB over bf16, an eighth of a
16 GB card, for norms and a head that our bf16 LoRA runs already train with in bf16 under autocast (RMSNorm computes
its variance in fp32 inside transformers' layers either way). The other things it does are done here or by the
recipe: the base is frozen (peft freezes it), and with gradient checkpointing the inputs require grad
(training/speed_plan.enable_gradient_checkpointing).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from steadytune.config import ModelArguments, RunConfig
from steadytune.errors import UserError
from steadytune.hardware.quantization import bitsandbytes_status, choose_compute_dtype
from steadytune.model.moe.quantized import FourBitWeight, dequantize_experts, is_placeholder

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def describe_quantization(model_args: ModelArguments) -> str:
    """'4-bit nf4 with double quantisation' / '8-bit (LLM.int8)'."""
    if model_args.quantization_bit == 8:
        return "8-bit (LLM.int8)"
    double = "with" if model_args.double_quantization else "without"
    return f"4-bit {model_args.quantization_type} {double} double quantisation"


def bnb_config(model_args: ModelArguments, compute_dtype: torch.dtype, skip_modules: Optional[list[str]] = None):
    """transformers' BitsAndBytesConfig for LLaMA-Factory's keys (quantization_bit, quantization_type,
    double_quantization), the compute dtype chosen by the hardware policy (hardware/quantization.py). `skip_modules`:
    module patterns left unquantised besides the output head (a vision-language model's vision tower and projector)."""
    from transformers import BitsAndBytesConfig

    # transformers drops its own skip list (the output head, tied weights) when one is given: "lm_head" keeps it
    skip = {"llm_int8_skip_modules": ["lm_head", *skip_modules]} if skip_modules else {}
    if model_args.quantization_bit == 8:
        return BitsAndBytesConfig(load_in_8bit=True, **skip)
    return BitsAndBytesConfig(load_in_4bit=True, **skip, bnb_4bit_quant_type=model_args.quantization_type,
                              bnb_4bit_use_double_quant=model_args.double_quantization,
                              bnb_4bit_compute_dtype=compute_dtype,
                              # the packed weights' storage dtype; uint8 is bitsandbytes' own (FSDP would need it
                              # equal to the compute dtype: several processes with FSDP are refused with a base
                              # quantised, see plan_quantization below)
                              bnb_4bit_quant_storage=torch.uint8)


def quantized_load_kwargs(model_args: ModelArguments, compute_dtype: torch.dtype,
                          device: Optional[torch.device], skip_modules: Optional[list[str]] = None) -> dict:
    """from_pretrained's extra arguments for a quantised base ({} without quantization_bit): bitsandbytes quantises
    each weight as it is loaded onto the device, so the full-precision base never sits whole in the GPU's memory."""
    if model_args.quantization_bit is None:
        return {}
    check_bitsandbytes_imports()
    where = device if device is not None else torch.device("cpu")
    return {"quantization_config": bnb_config(model_args, compute_dtype, skip_modules), "device_map": {"": where}}


def check_bitsandbytes_imports() -> None:
    """bitsandbytes imports here (its native library loads), or one line saying why and what to run."""
    try:
        import bitsandbytes  # noqa: F401  (optional dependency: the qlora extra)
    except ImportError as e:
        raise UserError(f"quantization_bit: bitsandbytes does not import ({str(e).splitlines()[0][:200]}); "
                        "pip install 'bitsandbytes>=0.50.0' (or: pip install 'steadytune[qlora]')") from None
    except Exception as e:   # a native library that does not load (ROCm: 'Configured ROCm binary not found')
        raise UserError(f"quantization_bit: bitsandbytes fails to load its native library: "
                        f"{str(e).splitlines()[0][:200]}; run `steadytune doctor` for the fix on this machine") from None


def is_quantized(model: nn.Module) -> bool:
    """A bitsandbytes-quantised base, through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False))


def quantized_linear_names(model: nn.Module) -> list[str]:
    """Qualified names of the layers bitsandbytes holds (Linear4bit, Linear8bitLt)."""
    return [name for name, module in model.named_modules()
            if type(module).__module__.startswith("bitsandbytes") and isinstance(module, nn.Linear)]


def higher_precision_parts(model: nn.Module) -> tuple[str, str]:
    """-> (what stays unquantised, its dtype): the weights outside bitsandbytes' layers, grouped by kind, for the
    start-up print and run_config.yaml."""
    quantized = set(quantized_linear_names(model))
    kinds: dict[str, int] = {}
    dtypes: set[str] = set()
    for name, param in model.named_parameters():
        owner = name.rsplit(".", 1)[0]
        if owner in quantized or "lora_" in name or is_placeholder(param):   # (a 4-bit expert weight's placeholder)
            continue
        leaf = owner.rsplit(".", 1)[-1]
        kind = ("norms" if "norm" in leaf else "embeddings" if "embed" in leaf else
                "output head" if leaf in ("lm_head", "score") else "biases" if name.endswith(".bias") else leaf)
        kinds[kind] = kinds.get(kind, 0) + param.numel()
        dtypes.add(str(param.dtype).replace("torch.", ""))
    parts = ", ".join(f"{kind} ({count:,} parameters)" for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return parts or "nothing", "/".join(sorted(dtypes)) or "-"


def record_quantization(model: nn.Module, model_args: ModelArguments, compute: str, decide) -> None:
    """The quantisation and what stayed in higher precision, as decisions (printed at start, kept in run_config.yaml).
    `decide`: RunConfig.decide."""
    layers = len(quantized_linear_names(model))
    kept, dtype = higher_precision_parts(model)
    experts = sum(isinstance(m, FourBitWeight) for m in model.modules())
    routed = (f", and {experts} fused expert weights in bitsandbytes' 4-bit format, each dequantised for its grouped "
              "matmul only (model/moe/quantized.py)" if experts else "")
    decide("quantization", describe_quantization(model_args),
           f"quantization_bit: {model_args.quantization_bit} -> {layers} linear layers held by bitsandbytes{routed}, "
           f"computing in {compute}")
    decide("higher_precision", f"{kept}: {dtype}",
           "not quantised: bitsandbytes converts only the decoder's linear layers (the output head is skipped); kept "
           "in the load dtype, not upcast to fp32 as peft's prepare_model_for_kbit_training would (for a 7B shape "
           "+2 GiB for the embeddings and head); LoRA weights are fp32")


def keep_training_layout(model: nn.Module) -> int:
    """Stop bitsandbytes' CPU inference repacking in a model that trains; -> layers changed.

    On a CPU with AVX512-BF16, a Linear4bit run in eval mode without grad (an evaluation during training) rewrites its
    weight in place into a layout for its CPU gemv kernel (bitsandbytes 0.50: `_convert_weight_packed_for_cpu`), and
    later forwards use that kernel, which has no backward: the next training step fails ("a view of a leaf Variable
    ... in-place operation", seen here). It also fails for layers narrower than a block (in_features < 64). Training
    keeps the layout it backpropagates through; inference-only loads keep the fast path.

    A layer already rewritten (a model scored before it trains: the demo's zero-shot accuracy, then training the
    same model) is put back into the plain layout, as bitsandbytes itself does before saving a state dict."""
    changed = 0
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
            changed += 1
            weight = getattr(module, "weight", None)
            if getattr(getattr(weight, "quant_state", None), "packing_format_for_cpu", False):
                from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse  # lazy: QLoRA runs only

                weight.data, weight.quant_state = _convert_weight_packed_for_cpu_inverse(weight.data,
                                                                                       weight.quant_state)
    return changed


def skip_narrow_repacking(model: nn.Module) -> None:
    """bitsandbytes 0.50's CPU repacking (see keep_training_layout) reshapes the absmax per row of blocks and fails for a
    layer narrower than one block (in_features not a multiple of the blocksize, tiny test models); those layers keep
    the plain layout. Real decoders' widths are multiples of 64: they keep the fast path."""
    for module in model.modules():
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if hasattr(module, "support_avx512bf16_for_cpu") and state is not None and \
                module.in_features % state.blocksize:
            module.support_avx512bf16_for_cpu = False


def logical_numel(param: torch.Tensor) -> int:
    """Parameters a weight stands for: a 4-bit weight packs two a byte (its tensor has half the elements); its
    quantisation state keeps the real shape."""
    state = getattr(param, "quant_state", None)
    shape = getattr(state, "shape", None)
    return int(torch.Size(shape).numel()) if shape is not None else param.numel()


def dequantize_base(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """The quantised base as plain nn.Linear weights in `dtype` (each 4-bit/8-bit weight decoded once): what the
    adapter was trained against, for a merge. Returns a plain model with no quantisation config."""
    dequantize_experts(model, dtype)   # a mixture of experts' 4-bit routed experts (model/moe/quantized.py)
    model = model.dequantize(dtype=dtype) if hasattr(model, "dequantize") else model
    model = model.to(dtype)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    for flag in ("is_loaded_in_4bit", "is_loaded_in_8bit", "is_quantized"):
        if getattr(model, flag, False):
            setattr(model, flag, False)
    model.hf_quantizer = None
    return model


def plan_quantization(cfg: RunConfig, info, precision: str, shard_plan) -> torch.dtype | None:
    """QLoRA (quantization_bit): bitsandbytes usable here (hardware/quantization.py: installed, at least this
    backend's and GPU's floor), the dtype its layers compute in; None without quantization_bit. Checked before any
    weights load; what bitsandbytes rules out among the speed features is applied by the speed plan."""
    bits = cfg.model.quantization_bit
    if bits is None:
        return None
    gpu = info.primary
    status = bitsandbytes_status(info.backend, gpu.arch if gpu is not None else None)
    if not status.usable:
        raise UserError(f"quantization_bit: {bits} needs bitsandbytes here: {status.why}; {status.fix}")
    if shard_plan.sharded:
        # DeepSpeed and FSDP wrap and flatten parameters of one dtype (even on one process); bitsandbytes' packed
        # uint8 weights carry their quantisation state beside them (LLaMA-Factory's FSDP+QLoRA stores them in the
        # compute dtype, bnb_4bit_quant_storage; not done here).
        raise UserError(f"quantization_bit: {bits} with {shard_plan.label} ({shard_plan.why}) is not supported; train "
                        "a quantised base without the deepspeed / fsdp keys (LLaMA-Factory v1: dist_config): on one "
                        "GPU, or with DDP (--nproc)")
    compute, why = choose_compute_dtype(precision)
    cfg.decide("bitsandbytes", status.installed, status.why)
    cfg.decide("bnb_compute_dtype", compute, why)
    return DTYPES[compute]
