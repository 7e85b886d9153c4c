"""Hardware facts and the policy built on them: which backend, which GPU architecture, which dtype, which
attention. `doctor` reports these decisions and `train` obeys them, so both read this one module.

bf16 is decided from the GPU architecture, never from `torch.cuda.is_bf16_supported()` alone: on ROCm that
call answers True on RDNA1/2 (gfx10xx), which has no native bf16 arithmetic (research/rocm.md section 5).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch


@dataclass
class GPU:
    index: int
    name: str
    arch: str                  # gfx90a / gfx942 / gfx1100 on ROCm; sm_90 on CUDA
    memory_gib: float
    integrated: bool = False   # APU / iGPU: listed, never chosen for training


@dataclass
class HardwareInfo:
    backend: str               # rocm | cuda | mps | cpu
    torch_version: str
    hip_version: Optional[str] = None
    cuda_version: Optional[str] = None
    gpus: list[GPU] = field(default_factory=list)

    @property
    def primary(self) -> Optional[GPU]:
        usable = [g for g in self.gpus if not g.integrated]
        return usable[0] if usable else None

    def to_dict(self) -> dict:
        return asdict(self)


def detect_backend() -> str:
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def detect() -> HardwareInfo:
    """What this process can use, as torch sees it (after *_VISIBLE_DEVICES have been applied)."""
    backend = detect_backend()
    info = HardwareInfo(backend=backend, torch_version=torch.__version__,
                        hip_version=getattr(torch.version, "hip", None), cuda_version=torch.version.cuda)
    if backend in ("rocm", "cuda"):
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            if backend == "rocm":
                arch = normalise_gfx(getattr(props, "gcnArchName", "") or "")
            else:
                arch = f"sm_{props.major}{props.minor}"
            info.gpus.append(GPU(index=i, name=props.name, arch=arch,
                                 memory_gib=round(props.total_memory / 2**30, 1),
                                 integrated=bool(getattr(props, "is_integrated", False))))
    return info


def normalise_gfx(arch: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a' (rocminfo and gcnArchName append target features)."""
    return arch.split(":")[0].strip().lower()


# --- precision -------------------------------------------------------------------------------------------

# gfx families with native bf16 matrix math (research/rocm.md section 5): CDNA1+ (gfx908, gfx90a, gfx94x, gfx95x),
# RDNA3+ (gfx11xx, gfx12xx). Not gfx906 (emulated) nor gfx10xx (RDNA1/2: no bf16 arithmetic).
_BF16_GFX = re.compile(r"^gfx(908|90a|94\d|95\d|11\d\w|12\d\w)$")


def arch_supports_bf16(arch: str) -> bool:
    arch = arch.lower()
    if arch.startswith("gfx"):
        return bool(_BF16_GFX.match(normalise_gfx(arch)))
    match = re.match(r"sm_(\d+)", arch)
    return bool(match) and int(match.group(1)) >= 80  # Ampere and newer


def choose_precision(info: HardwareInfo, bf16: bool | str = "auto", fp16: bool | str = False) -> tuple[str, str]:
    """-> (dtype name for mixed precision: 'bf16' | 'fp16' | 'fp32', reason)."""
    gpu = info.primary
    if info.backend == "cpu" or gpu is None:
        if bf16 is True:
            return "bf16", "bf16: true was asked for; on CPU this is slow and less exact than fp32"
        return "fp32", "CPU: fp32 (bf16 autocast on CPU is slower here and gains nothing in memory for LoRA)"
    native = arch_supports_bf16(gpu.arch)
    if bf16 is True:
        if not native:
            return "bf16", f"bf16: true was asked for, but {gpu.arch} has no native bf16 (emulated, slow); consider fp16"
        return "bf16", "bf16: true"
    if fp16 is True:
        warn = " (gfx90a flushes fp16 denormals in MFMA: prefer bf16)" if gpu.arch == "gfx90a" else ""
        return "fp16", f"fp16: true{warn}"
    if bf16 == "auto":
        if native:
            return "bf16", f"bf16: auto -> {gpu.arch} has native bf16 matrix math"
        if fp16 == "auto":
            return "fp16", f"bf16: auto -> {gpu.arch} lacks native bf16; fp16: auto -> fp16 with loss scaling"
        return "fp32", f"bf16: auto -> {gpu.arch} lacks native bf16 -> fp32 (set fp16: true for speed, with loss scaling)"
    if fp16 == "auto":
        return "fp16", "fp16: auto on a GPU"
    return "fp32", "bf16 and fp16 are off"


# --- attention -------------------------------------------------------------------------------------------

class AttentionUnavailable(RuntimeError):
    pass


def flash_attn_status() -> tuple[bool, str]:
    """Whether flash-attn imports *and runs* here (a broken ROCm build imports fine and fails on first call)."""
    try:
        import flash_attn  # noqa: F401
        from flash_attn import flash_attn_func
    except Exception as e:  # ImportError, or an undefined symbol in a mismatched build
        return False, f"flash-attn does not import: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return False, "flash-attn needs a GPU"
    try:
        q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
        flash_attn_func(q, q, q, causal=True)
        torch.cuda.synchronize()
    except Exception as e:
        return False, f"flash-attn imports but fails to run: {type(e).__name__}: {e}"
    return True, f"flash-attn {getattr(flash_attn, '__version__', '?')} runs"


def choose_attention(info: HardwareInfo, requested: str = "auto") -> tuple[str, str]:
    """-> (transformers attn_implementation, reason)."""
    if requested in ("auto", "sdpa"):
        why = "auto -> SDPA (PyTorch fused attention: works on ROCm via AOTriton, on CUDA and CPU)" if requested == "auto" else "sdpa"
        return "sdpa", why
    if requested in ("eager", "disabled"):
        return "eager", f"{requested}: plain matmul attention"
    if requested == "fa2":
        ok, why = flash_attn_status()
        if not ok:
            raise AttentionUnavailable(f"flash_attn: fa2 was asked for, but {why}. Use flash_attn: sdpa "
                                       "(the fast default) or install a flash-attn build for this platform.")
        return "flash_attention_2", why
    raise AttentionUnavailable(f"unknown flash_attn value {requested!r}")


def device_for(info: HardwareInfo) -> torch.device:
    if info.backend in ("rocm", "cuda"):
        return torch.device("cuda")
    if info.backend == "mps":
        return torch.device("mps")
    return torch.device("cpu")
