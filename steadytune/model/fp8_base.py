"""FP8 matrix multiplies for the frozen base of a LoRA model (`fp8_base: true`; bench `--fp8-base on`): where they
are used by default, and swapping the base layers in and out.

In LoRA training the base weights never change, and two of a linear layer's three matmuls touch them: the forward
(x @ W^T) and the input gradient (g @ W); the weight gradient is not needed. Hopper and Ada tensor cores multiply fp8
at twice the bf16 rate. So each frozen base linear is quantised to fp8 (e4m3) once, at start, in the two layouts
those matmuls read (W with a scale per output row, W^T with a scale per input column), and each step quantises only
the activations and the incoming gradients, one scale per row (token), before `torch._scaled_mm`
(model/fp8_matmul.py). A 4-bit base (QLoRA) keeps its 4 bits and is unpacked straight into fp8 at each matmul
(model/fp8_4bit.py). The LoRA adapters, norms, attention and the head stay as they were.

Why not torchao's Float8Linear: it is built for training the weight too. It computes the weight gradient in every
backward (a third of the layer's work, thrown away for a frozen weight) and quantises the weight again each step.

The adapters train in bf16/fp32 as before and are scored, saved and exported over the base they will be used on
(`restore_base` after training puts the bf16 or bitsandbytes layers back).

When it is on by default (`decide_fp8_base`, for train and bench): a CUDA GPU that multiplies fp8, a bf16 run whose
decoder layers are compiled (eager, each matmul's quantisation is several kernels of its own), a model large enough
that the matmuls, not the quantisation around them, are the time (hidden >= AUTO_MIN_HIDDEN), and copies that do not
turn gradient checkpointing on. Not over an 8-bit base (LLM.int8 multiplies its own way).

Where: CUDA GPUs of compute capability 8.9 and up (Ada, Hopper, Blackwell) in OCP e4m3; on ROCm, MI300 (gfx942) in
its own e4m3fnuz (largest finite 240, not 448) and MI350 (gfx950) and RDNA4 (gfx1200, gfx1201) in OCP e4m3, the archs
torch._scaled_mm takes there (hipBLASLt; torch ScaledBlas.cpp `_scaled_mm_allowed_device`), under bf16 only (its
row-scaled fp8 matmul writes bf16 only); on a CPU `torch._scaled_mm` also runs (slowly: it is for tests). The format
is chosen by the GPU's architecture (kernel_catalogue.fp8_format, from the arch table) and said in the reason.
On ROCm it is off by default until timed there (the default needs compiled layers, which ROCm runs do not get by
default); `fp8_base: true` turns it on.
"""

from __future__ import annotations

import re

import torch

from steadytune.hardware.memory import choose_gradient_checkpointing
from steadytune.model.anatomy import base_model_of, speed_scope, text_config
from steadytune.model.fp8_4bit import Fp8Over4bitLinear, fits_4bit_layout, is_4bit_linear
from steadytune.model.fp8_matmul import FORMATS, FP8, Fp8FrozenLinear, fp8_max
from steadytune.model.kernel_catalogue import device_arch, fp8_format
from steadytune.model.linear_attention import deltanet_submodules

# The smallest shape measured faster with fp8 on an H200 (Qwen2.5-0.5B, hidden 896: 1.05x the tokens/s; Gemma 3 1B
# 1.05x, 1.5B 1.13x, 7B 1.33x: docs/speed.md). Below it nothing was measured, so the default stays off there.
AUTO_MIN_HIDDEN = 896
FP8_OVER_8BIT = ("quantization_bit 8: LLM.int8 multiplies the base its own way (int8, outliers apart); fp8 is for a "
                 "bf16 or 4-bit base")


# The ROCm archs torch._scaled_mm runs on, and the ROCm release torch must be built with for each (torch
# aten/src/ATen/native/cuda/ScaledBlas.cpp, _scaled_mm_allowed_device: gfx942; gfx1200/gfx1201 from ROCm 6.3;
# gfx950 from 6.5). Row-wise scales on ROCm (a scale per token and per weight row, what the fp8 base uses) came with
# hipBLASLt's rowwise fp8 gemm, pytorch PR #144432, in torch 2.7.
ROCM_SCALED_MM = {"gfx942": (6, 0), "gfx1200": (6, 3), "gfx1201": (6, 3), "gfx950": (6, 5)}
ROCM_ROWWISE_TORCH = (2, 7)
ROCM_BF16_ONLY = ("on ROCm torch._scaled_mm with a scale per row writes bf16 only (torch ScaledBlas.cpp: 'hipblaslt "
                  "rowwise _scaled_mm only supports BFloat16 output')")


def fp8_support(device: torch.device) -> tuple[bool, str]:
    """(whether this device runs the fp8 base, why)."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no fp8 matmul (torch._scaled_mm)"
    if device.type == "cuda":
        hip = getattr(torch.version, "hip", None)
        if hip:
            return fp8_arch_support("rocm", device_arch(device), _version(hip), _version(torch.__version__))
        major, minor = torch.cuda.get_device_capability(device)
        return fp8_arch_support("cuda", f"sm_{major}{minor}")
    if device.type == "cpu":
        return True, "CPU: torch._scaled_mm runs, slower than bf16 (for tests)"
    return False, f"{device.type}: no fp8 matmul here"


def _version(text: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def fp8_dtype_for(device: torch.device) -> torch.dtype:
    """The e4m3 format this device's fp8 matmuls take: e4m3fnuz on MI300 (gfx942), OCP e4m3fn elsewhere (and on a
    CPU, whose _scaled_mm takes both)."""
    if device.type == "cuda" and getattr(torch.version, "hip", None):
        return FORMATS[fp8_format(device_arch(device)) or "ocp"]
    return FP8


def describe_format(dtype: torch.dtype) -> str:
    if dtype == FORMATS["fnuz"]:
        return f"e4m3fnuz (MI300's own fp8: largest finite {fp8_max(dtype):g}, no infinity, one zero)"
    return f"OCP e4m3 (e4m3fn: largest finite {fp8_max(dtype):g})"


def fp8_arch_support(backend: str, arch: str | None, rocm: tuple[int, int] | None = None,
                     torch_version: tuple[int, int] | None = None) -> tuple[bool, str]:
    """(whether a GPU of this backend and architecture, "sm_90" on CUDA, "gfx942" on ROCm, runs the fp8 base, why,
    naming the fp8 format): for the device in hand and for doctor's reading of a machine alike. rocm / torch_version:
    what the torch in hand was built with, where known."""
    if backend == "rocm":
        return _rocm_fp8_support(arch, rocm, torch_version)
    capability = re.fullmatch(r"sm_(\d+)(\d)", arch or "")
    if backend != "cuda" or capability is None:
        where = f"{backend} {arch}" if arch else f"{backend}, architecture unknown"
        return False, f"{where}: no fp8 tensor cores known for it"
    major, minor = int(capability.group(1)), int(capability.group(2))
    if (major, minor) < (8, 9):
        return False, f"sm_{major}{minor} has no fp8 tensor cores (Ada sm_89, Hopper sm_90 and later do)"
    return True, f"sm_{major}{minor} multiplies fp8 at twice the bf16 rate, in {describe_format(FP8)}"


def _rocm_fp8_support(arch: str | None, rocm: tuple[int, int] | None,
                      torch_version: tuple[int, int] | None) -> tuple[bool, str]:
    if not arch:
        return False, "ROCm, architecture unknown: the fp8 format (e4m3fnuz on MI300, OCP e4m3 on MI350/RDNA4) follows it"
    fmt = fp8_format(arch)
    if fmt is None:
        return False, f"{arch}: no fp8 matrix cores (MI300 gfx942, MI350 gfx950 and RDNA4 gfx1200/gfx1201 have them)"
    if arch not in ROCM_SCALED_MM:
        return False, f"{arch}: torch._scaled_mm on ROCm runs on {', '.join(ROCM_SCALED_MM)} only (torch ScaledBlas.cpp)"
    floor = ROCM_SCALED_MM[arch]
    if rocm is not None and rocm < floor:
        return False, (f"{arch}: torch._scaled_mm needs a torch built with ROCm {floor[0]}.{floor[1]} or later there; "
                       f"this one has ROCm {rocm[0]}.{rocm[1]}")
    if torch_version is not None and torch_version < ROCM_ROWWISE_TORCH:
        return False, (f"torch {torch_version[0]}.{torch_version[1]}: row-scaled fp8 matmuls on ROCm came in torch 2.7 "
                       "(pytorch PR #144432)")
    return True, (f"{arch} multiplies {describe_format(FORMATS[fmt])} through torch._scaled_mm (hipBLASLt, a scale "
                  "per row, bf16 out)")


def auto_fp8_blocker(device: torch.device, precision: str, compiled: bool, hidden_size: int) -> str | None:
    """Why fp8_base stays off by default on this run, or None where it goes on (fp8_base: true/false decide alone)."""
    return default_blocker_on(device.type, fp8_support(device), precision, compiled, hidden_size)


def default_blocker_on(device_type: str, support: tuple[bool, str], precision: str, compiled: bool,
                       hidden_size: int) -> str | None:
    """auto_fp8_blocker from what is known of the device: its torch type ("cuda" on ROCm too) and fp8_support's
    answer (doctor passes fp8_arch_support's for a machine it reads)."""
    supported, why = support
    if device_type != "cuda":
        return f"{device_type}: fp8 is faster only on a GPU's fp8 tensor cores (fp8_base: true still runs it here)"
    if not supported:
        return why
    if precision != "bf16":
        return f"precision {precision}: the fp8 base is measured under bf16 only"
    if not compiled:
        return ("the decoder layers are not compiled: eager, each matmul's fp8 quantisation is several kernels of "
                "its own")
    if hidden_size < AUTO_MIN_HIDDEN:
        return (f"hidden {hidden_size} < {AUTO_MIN_HIDDEN}: matmuls this small gain less than their inputs' "
                f"quantisation costs (measured faster from the 0.5B shape, hidden 896, up)")
    return None


def config_blocker(cfg, shard_kind: str | None = None) -> str | None:
    """What in a run's config rules the fp8 base out (for the default, also a stage it was not measured for);
    shard_kind: the run's sharding (deepspeed, fsdp), if any. cfg: a RunConfig."""
    if cfg.method.finetuning_type != "lora":
        return f"finetuning_type {cfg.method.finetuning_type}: only a frozen LoRA base is multiplied in fp8"
    if shard_kind in ("deepspeed", "fsdp"):
        return f"{shard_kind} shards the base weights; the fp8 copies would be whole on every rank"
    if cfg.model.quantization_bit == 8:
        return FP8_OVER_8BIT
    if cfg.train.fp8_base is None and cfg.method.stage not in ("sft", "pt"):
        return f"stage {cfg.method.stage}: measured for sft and pt only (fp8_base: true asks for it)"
    return None


def default_fp8_blocker(model: torch.nn.Module, device: torch.device, precision: str, compiled: bool, tokens: int,
                        budget_gib: float | None, state_gib: float,
                        checkpointing_asked: bool | None = None) -> str | None:
    """auto_fp8_blocker, and one more where checkpointing is the policy's to choose: the copies must not turn it on
    (recomputing a third of the work costs more than fp8 gains)."""
    config = text_config(model)   # a vision-language model's sizes are its language model's
    blocker = auto_fp8_blocker(device, precision, compiled, config.hidden_size)
    if blocker is not None or checkpointing_asked is not None:
        return blocker
    copies = fp8_copies_gib(model)
    without = choose_gradient_checkpointing(config, tokens, budget_gib, compiled=compiled, state_gib=state_gib)[0]
    with_copies = choose_gradient_checkpointing(config, tokens, budget_gib, compiled=compiled,
                                                state_gib=state_gib + copies)[0]
    if with_copies and not without:
        return f"its copies of the base ({copies:.1f} GiB) would turn gradient checkpointing on"
    return None


def decide_fp8_base(model: torch.nn.Module, asked: bool | None, device: torch.device, precision: str, compiled: bool,
                    tokens: int, budget_gib: float | None, state_gib: float, checkpointing_asked: bool | None = None,
                    ruled_out: str | None = None) -> tuple[bool, str]:
    """The fp8_base decision of train and bench alike, applied where it is on; -> (on, reason). asked: the key's
    true / false, or None for the default (default_fp8_blocker decides); ruled_out: what in the run's set-up rules
    fp8 out (a 4-bit base, sharding, a stage the default was not measured for)."""
    if asked is False:
        return False, "off: fp8_base: false was asked for"
    if ruled_out is None and asked is None:
        ruled_out = default_fp8_blocker(model, device, precision, compiled, tokens, budget_gib, state_gib,
                                        checkpointing_asked)
    if ruled_out is None and device.type == "cuda" and getattr(torch.version, "hip", None) and precision != "bf16":
        ruled_out = f"precision {precision}: {ROCM_BF16_ONLY}"
    if ruled_out is not None:
        return False, f"off: {ruled_out}"
    on, why = apply_fp8_base(model, device)
    if asked is None and on:
        why = f"on by default: {why}; fp8_base: false turns it off"
    return on, why


def lora_linear_bases(model: torch.nn.Module) -> list:
    """(LoRA layer, its base) for each LoRA layer over a plain nn.Linear or bitsandbytes' 4-bit linear."""
    return [(module, module.base_layer) for module in speed_scope(model).modules()
            if hasattr(module, "lora_A") and (type(getattr(module, "base_layer", None)) is torch.nn.Linear
                                              or is_4bit_linear(getattr(module, "base_layer", None)))]


def eligible_layers(model: torch.nn.Module) -> list:
    """(LoRA layer, its frozen base) for each base the fp8 kernels take: sizes multiples of 16 (and, 4-bit, the
    packing fp8_4bit unpacks)."""
    eligible = []
    # A gated DeltaNet layer's projections stay as they are: its decay and write gates come out of them and compound
    # over every later token of the recurrence, and fp8 there has not been measured (full attention and MLP have).
    recurrent = deltanet_submodules(model)
    for module, base in lora_linear_bases(model):
        if id(module) in recurrent:
            continue
        if is_4bit_linear(base):
            fits = fits_4bit_layout(base)
        else:
            fits = (not base.weight.requires_grad and base.weight.dtype.is_floating_point and base.weight.dim() == 2
                    and base.weight.shape[0] % 16 == 0 and base.weight.shape[1] % 16 == 0)
        if fits:
            eligible.append((module, base))
    return eligible


def fp8_copies_gib(model: torch.nn.Module) -> float:
    """GiB that use_fp8_base would add: two 1-byte layouts of each eligible bf16 base and an fp32 scale per row of
    each; a 4-bit base keeps no copy, only its scales."""
    return sum((0 if is_4bit_linear(base) else 2 * base.weight.numel()) + 4 * (base.out_features + base.in_features)
               for _, base in eligible_layers(model)) / 2**30


def use_fp8_base(model: torch.nn.Module, dtype: torch.dtype = FP8) -> tuple[int, str]:
    """Swap the frozen base linear of every LoRA layer for its fp8 form; -> (layers changed, reason).

    Only layers whose sizes the fp8 kernels take (multiples of 16) and whose weight is frozen; the others stay as they
    are and are counted in the reason. (A GPU run's base is bf16; a CPU run's fp32 base works the same way; a 4-bit
    base is unpacked into fp8 at each matmul, model/fp8_4bit.py.) dtype: the e4m3 format (fp8_dtype_for)."""
    eligible = eligible_layers(model)
    changed, kept = len(eligible), len(lora_linear_bases(model)) - len(eligible)
    four_bit = 0
    for module, base in eligible:
        if is_4bit_linear(base):
            module.base_layer, four_bit = Fp8Over4bitLinear(base, dtype=dtype), four_bit + 1
        else:
            module.base_layer = Fp8FrozenLinear(base, dtype=dtype)
    why = (f"the frozen base of {changed} LoRA layers multiplies in fp8 ({describe_format(dtype)}, a scale per row), "
           "forward and input gradient")
    if four_bit:
        why += f" ({four_bit} of them 4-bit, unpacked into fp8 at each matmul)"
    if kept:
        why += f"; {kept} layers kept as they were (trainable, sizes not multiples of 16, or in a gated DeltaNet layer)"
    return changed, why


def restore_base(model: torch.nn.Module) -> int:
    """Put each fp8 base back as the layer it was (an nn.Linear over the same weight and bias tensors, the copies
    freed; a 4-bit base's own bitsandbytes layer): after training, scoring, generation and export use the base the
    adapter will be used on. -> layers restored."""
    restored = 0
    for module in list(model.modules()):
        base = getattr(module, "base_layer", None)
        if isinstance(base, Fp8Over4bitLinear):
            module.base_layer = base.original
            restored += 1
        elif isinstance(base, Fp8FrozenLinear):
            linear = torch.nn.Linear(base.in_features, base.out_features, bias=base.bias is not None, device="meta")
            linear.weight, linear.bias = base.weight, base.bias
            module.base_layer = linear
            restored += 1
    return restored


def set_fast_accumulation(model: torch.nn.Module, fast: bool) -> int:
    """Fast (the default) or exact fp8 accumulation in every fp8 base of `model` (bench --fp8-accumulation, to
    measure what it buys); -> layers set."""
    layers = [m for m in model.modules() if isinstance(m, (Fp8FrozenLinear, Fp8Over4bitLinear))]
    for layer in layers:
        layer.fast_accumulation = fast
    return len(layers)


def apply_fp8_base(model: torch.nn.Module, device: torch.device) -> tuple[bool, str]:
    """fp8 for the frozen base where `device` multiplies fp8; -> (on: some layer changed, why). For train's fp8_base
    and bench's --fp8-base alike; called before the first forward, when the compiled layers trace the fp8 matmuls."""
    supported, why = fp8_support(device)
    if not supported:
        return False, why
    changed, how = use_fp8_base(model, fp8_dtype_for(device))
    return changed > 0, f"{how} ({why})"
