"""LLaMA-Factory's fp8 training (`fp8`, `fp8_backend`, `fp8_enable_fsdp_float8_all_gather`): every eligible linear
layer of the model trains through torchao's float8 matmuls (forward, input gradient and weight gradient), the
weights themselves staying in their training dtype.

As LLaMA-Factory 0.9.5 does it (train/fp8_utils.py, through Accelerate's AORecipeKwargs): torchao's `rowwise`
recipe (a scale per row), and its module filter: no embedding, output head or classifier (names containing embed,
lm_head, output, classifier), only 2-D weights whose both sides are multiples of 16 (the fp8 kernels' alignment).
Here torchao's `convert_to_float8_training` swaps those layers before the optimizer and any sharding wrap them.

Where: CUDA GPUs of compute capability 8.9 and up (Ada, Hopper, Blackwell), and AMD's MI300 (gfx942: torchao picks
the fnuz formats) and MI350 (gfx950, OCP formats). Refused elsewhere with the reason, before any weight loads:
a CPU or an older GPU has no fp8 matmul worth training with. LoRA has its own fp8 path (fp8_base: the frozen base
in fp8; LLaMA-Factory's fp8 is a full or freeze fine-tuning key), and a quantised base cannot (as in LLaMA-Factory).
`fp8_enable_fsdp_float8_all_gather`: torchao all-gathers float8 weights with tensor-wise scales only; under the
rowwise recipe that LLaMA-Factory uses the flag changes nothing there, and here it is recorded as such.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass

from torch import nn

from steadytune.errors import UserError
from steadytune.hardware.gpu_facts import arch_info

RECIPE = "rowwise"
SKIPPED_NAMES = ("embed", "lm_head", "output", "classifier")
ALIGNMENT = 16


@dataclass
class Fp8Plan:
    recipe: str
    why: str


def fp8_hardware_blocker(backend: str, arch: str | None) -> str | None:
    """Why this machine cannot train in fp8 through torchao, or None."""
    if backend == "cuda":
        capability = re.fullmatch(r"sm_(\d+)(\d)", arch or "")
        if capability is None:
            return f"CUDA GPU of unknown architecture ({arch}): fp8 needs compute capability 8.9 or later"
        if (int(capability.group(1)), int(capability.group(2))) < (8, 9):
            return (f"{arch} has no fp8 tensor cores: fp8 training needs compute capability 8.9 or later (Ada, "
                    "Hopper, Blackwell)")
        return None
    if backend == "rocm":
        row = arch_info(arch)
        if row is None or row.fp8 is None:
            return (f"ROCm {arch or '(architecture unknown)'}: no fp8 matmul that torchao trains with (MI300 gfx942 "
                    "and MI350 gfx950 have one)")
        return None
    return (f"{backend}: fp8 training needs a GPU with fp8 matmuls (NVIDIA compute capability 8.9+, AMD MI300/MI350); "
            "this machine has none. Train in bf16 here (remove fp8), or run this file on such a GPU")


def plan_fp8_training(train, method, model_args, backend: str, arch: str | None) -> Fp8Plan | None:
    """None without fp8; else the plan, or UserError naming the key and why (checked before anything loads)."""
    if not train.fp8:
        if train.fp8_enable_fsdp_float8_all_gather:
            raise UserError("fp8_enable_fsdp_float8_all_gather: true needs fp8: true (LLaMA-Factory turns fp8 on "
                            "for it with a warning; set fp8: true to train in fp8)")
        return None
    if train.fp8_backend in ("te", "msamp"):
        raise UserError(f"fp8_backend: {train.fp8_backend} is not supported (NVIDIA Transformer Engine / MS-AMP); "
                        "fp8_backend: torchao (or auto) trains in fp8 through torchao")
    if method.finetuning_type == "lora":
        raise UserError("fp8: true trains every weight through fp8 matmuls (full or freeze fine-tuning); for LoRA, "
                        "fp8_base: true multiplies the frozen base in fp8")
    if model_args.quantization_bit is not None:
        raise UserError("fp8: true with quantization_bit: not compatible (as in LLaMA-Factory); disable one of them")
    blocker = fp8_hardware_blocker(backend, arch)
    if blocker:
        raise UserError(f"fp8: {blocker}")
    if importlib.util.find_spec("torchao") is None:
        raise UserError("fp8: true needs torchao: pip install 'steadytune[fp8]'")
    why = (f"torchao float8, {RECIPE} scales, on {arch}: every linear layer but embeddings and the head (sides "
           f"multiples of {ALIGNMENT}), as LLaMA-Factory")
    if train.fp8_enable_fsdp_float8_all_gather:
        why += ("; fp8_enable_fsdp_float8_all_gather changes nothing under rowwise scales (torchao all-gathers "
                "float8 with tensor-wise scales only), as in LLaMA-Factory")
    return Fp8Plan(RECIPE, why)


def takes_fp8(module: nn.Module, name: str) -> bool:
    """LLaMA-Factory's module filter: which layers train through fp8 matmuls."""
    if any(part in name.lower() for part in SKIPPED_NAMES):
        return False
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:
        return False
    out_features, in_features = weight.shape
    return in_features % ALIGNMENT == 0 and out_features % ALIGNMENT == 0


def fp8_layer_names(model: nn.Module) -> list[str]:
    """The linear layers convert_to_float8 swaps (the filter above, over nn.Linear as torchao walks them)."""
    return [name for name, module in model.named_modules() if isinstance(module, nn.Linear) and takes_fp8(module, name)]


def convert_to_fp8(model: nn.Module, plan: Fp8Plan) -> int:
    """Swap the layers for torchao's Float8Linear (same weight Parameters); -> how many."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training   # optional dependency: the fp8 extra

    chosen = set(fp8_layer_names(model))
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(plan.recipe),
                               module_filter_fn=lambda module, name: name in chosen)
    return len(chosen)
