"""What the install readings share: the torch a paste lists and its CUDA label, the tool x family fix
table filled with them, and the pip package that ships each compiled module."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import rocm_index_for
from steadytune.doctor.tool_fixes import machine_kinds, tool_fix
from steadytune.doctor.rules.base import Context, _cuda_index_for_driver, _text, _vendor


def _listed_torch_version(ctx: Context) -> Optional[str]:
    return next((f.value for f in ctx.sheet.of("torch") if f.value[:1].isdigit()), None) or _listed_torch(ctx)


def _cuda_label(ctx: Context) -> Optional[str]:
    """The CUDA label of the torch the paste is about (cu126): a pytorch.org index it names, a +cuXYZ build, else a
    CUDA version it states beside torch ("PyTorch 2.6.0 and cuda 12.6")."""
    text = _text(ctx)
    said = (re.search(r"download\.pytorch\.org/whl/(?:nightly/)?(cu\d{3})\b", text)
            or re.search(r"\btorch\S*?\+(cu\d{3})\b", text))
    if said:
        return said.group(1)
    version = re.search(r"(?i)\bcuda\s*(?:version:?\s*)?(1[12])\.(\d)\b", text)
    return f"cu{version.group(1)}{version.group(2)}" if version else None


def cuda_of_label(label: str) -> str:
    """The CUDA release a pytorch.org wheel label stands for: cu117 -> 11.7, cu128 -> 12.8."""
    return f"{label[2:-1]}.{label[-1]}"


# torch's own CUDA: a +cuXYZ build (a wheel name, pip's download line, torch.__version__), or torch.version.cuda's answer
_TORCH_CUDA = (re.compile(r"\btorch\W{0,3}(?:\d+\.\d+(?:\.\d+)?)?\S{0,40}?(?:\+|%2B)cu(\d{2})(\d)\b"),
               re.compile(r"(?is)\btorch\.(?:version\.cuda|cuda_version)\b.{0,40}?'(\d{1,2})\.(\d)'"),
               re.compile(r"(?i)\bCUDA used to build PyTorch:\s*(\d{1,2})\.(\d)"),
               re.compile(r"\bPyTorch version:\s*\S{1,40}?\+cu(\d{2})(\d)\b"),
               re.compile(r"\b__version__\W{0,10}\d+\.\d+(?:\.\d+)?\+cu(\d{2})(\d)\b"))


def _torch_cuda(text: str) -> Optional[tuple[int, int]]:
    """The CUDA (major, minor) the installed torch was built with, where the paste shows it."""
    for pattern in _TORCH_CUDA:
        found = pattern.search(text)
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


# the HIP SDK release the paste names ("HIP 6.2", "HIP SDK 6.2.4", "ROCm\\6.2\\bin")
_HIP_SDK = re.compile(r"(?i)\bHIP(?: ?SDK)?[ /v]{0,3}(\d)\.(\d)(?:\.\d)?\b|ROCm[\\/](\d)\.(\d)[\\/]")


def hip_sdk_release(text: str) -> Optional[tuple[str, str]]:
    """The Windows HIP SDK release (major, minor) the paste names, or None: one reader for the ZLUDA readings, which
    split on it (a 6.x SDK under ZLUDA's 5.7 build is zluda_hip_release's; otherwise PATH is libraries_missing's)."""
    sdk = _HIP_SDK.search(text)
    if sdk is None:
        return None
    return (sdk.group(1), sdk.group(2)) if sdk.group(1) else (sdk.group(3), sdk.group(4))


def _table_fix(ctx: Context, tool: Optional[str], family_name: str, kinds: Optional[frozenset[str]] = None,
               **values: Optional[str]) -> Optional[str]:
    """The tool x family table's fix (tool_fixes.yaml) for this machine's OS and GPU vendor (or the `kinds` given),
    with its values."""
    arch, _ = ctx.arch()
    torch = _listed_torch_version(ctx)
    filled = {"torch": f"torch {torch}" if torch else None, "rocm_index": rocm_index_for(arch),
              "cuda_index": _cuda_index_for_driver(ctx, arch), "cuda_label": _cuda_label(ctx), **values}
    if kinds is None:
        kinds = machine_kinds(ctx.sheet.is_windows, _vendor(ctx), _text(ctx))
    return tool_fix(tool, family_name, kinds, filled)


# The compiled modules people meet in these errors, by the name in the path or the import, and the pip package that
# ships each (the fix reinstalls the package, not the module)
_MODULE_PACKAGES = (
    (r"flash_attn", "flash-attn"),
    # vLLM 0.1-0.2 shipped its kernels as top-level modules of their own (setup.py's CUDAExtension names)
    (r"vllm|\b(?:cache|attention|activation|pos_encoding|layernorm|quantization)_ops\b|\b_moe_C\b", "vllm"), (r"xformers", "xformers"), (r"bitsandbytes", "bitsandbytes"),
    (r"torchaudio|_torch_sox", "torchaudio"), (r"torchvision", "torchvision"), (r"deepspeed|fused_adam|cpu_adam|"
    r"transformer_inference|fused_lamb", "deepspeed"), (r"\bapex\b|amp_C|fused_layer_norm_cuda", "apex"),
    (r"sageattention|_qattn", "sageattention"), (r"mamba_ssm|selective_scan", "mamba-ssm"),
    (r"causal_conv1d", "causal-conv1d"), (r"torch_scatter|torch_sparse|torch_cluster|torch_spline_conv", "torch-scatter"),
    (r"mmcv", "mmcv"), (r"detectron2", "detectron2"), (r"pytorch3d", "pytorch3d"), (r"exllamav2\w*", "exllamav2"), (r"auto_gptq|exllama\w*",
    "auto-gptq"), (r"transformer_engine", "transformer-engine"), (r"llama_cpp", "llama-cpp-python"),
    (r"torch_directml", "torch-directml"), (r"natten", "natten"), (r"spconv", "spconv"), (r"gsplat|diff_gaussian",
    "the gaussian-splatting extension"), (r"nvdiffrast", "nvdiffrast"), (r"tinycudann|tiny_cuda_nn", "tinycudann"),
)


def _listed_torch(ctx: Context) -> Optional[str]:
    """torch's version from a package list (`- torch 2.1.2`, `torch==2.1.2`, `torch: 2.1.2`) when no fact holds it."""
    found = re.search(r"(?im)^\W*torch\s*(?:==|:|\s)\s*(\d+\.\d+\.\d+[\w.+]*)\s*$", _text(ctx))
    return found.group(1) if found else None
