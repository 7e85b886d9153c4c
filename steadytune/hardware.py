"""Hardware facts and the policy built on them: which backend, which GPU architecture, which dtype, which
attention. `doctor` reports these decisions and `train` obeys them, so both read this one module.

bf16 is decided from the GPU architecture, never from `torch.cuda.is_bf16_supported()` alone: on ROCm that
call answers True on RDNA1/2 (gfx10xx), which has no native bf16 arithmetic (research/rocm.md section 5).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from steadytune.errors import UserError
from steadytune.gpu_facts import (AMD_DEVICE_IDS, GENERIC_AMD_NAMES, OFFICIAL_WHEEL_ARCHS,  # noqa: F401
                                  PRODUCTS, Product, arch_info, lookup_product, normalise_gfx,
                                  override_for_arch)

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that need it: the tables and arch rules below also serve
# `steadytune doctor --from` on saved tool outputs, which must work where torch itself does not import.
# The product, architecture and wheel tables are data in gpu_facts.py, each row with its source; this module
# turns them into decisions (names re-exported above because doctor, bench and smi_parsers import them here).


@dataclass
class GPU:
    index: int
    name: str
    arch: str                  # gfx90a / gfx942 / gfx1100 on ROCm; sm_90 on CUDA
    memory_gib: float          # as torch reports it
    integrated: bool = False   # APU / iGPU: trains only when it is the only GPU and worth it (gpu_facts.Arch)
    bus_id: Optional[str] = None              # PCI address, 0000:c5:00.0
    usable_memory_gib: Optional[float] = None  # APU: carve-out or GTT, whichever is larger (unified_memory.py)
    memory_note: str = ""

    @property
    def budget_gib(self) -> float:
        """The memory train plans with: the usable figure of an APU, else what torch reports."""
        return self.usable_memory_gib or self.memory_gib


@dataclass
class HardwareInfo:
    backend: str               # rocm | cuda | mps | cpu
    torch_version: str
    hip_version: Optional[str] = None
    cuda_version: Optional[str] = None
    gpus: list[GPU] = field(default_factory=list)

    @property
    def primary(self) -> Optional[GPU]:
        """The GPU train uses: the first discrete one; else an APU of an architecture worth training on (Strix
        Halo with 64-128 GB shared); never a small iGPU next to a discrete card (rocm.md row 5)."""
        discrete = [g for g in self.gpus if not g.integrated]
        if discrete:
            return discrete[0]
        apus = [g for g in self.gpus if (row := arch_info(g.arch)) is not None and row.apu_trains]
        return apus[0] if apus else None

    def to_dict(self) -> dict:
        return asdict(self)


def detect_backend() -> str:
    import torch
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def detect(sys_root: str | Path = "/sys") -> HardwareInfo:
    """What this process can use, as torch sees it (after *_VISIBLE_DEVICES have been applied). An APU's usable
    memory comes from the driver's GTT figure in sysfs, since torch may report only the small carve-out."""
    import torch
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
            product = lookup_product(props.name)
            integrated = bool(getattr(props, "is_integrated", False)) or bool(product and product.integrated)
            info.gpus.append(GPU(index=i, name=props.name, arch=arch, bus_id=_bus_id(props),
                                 memory_gib=round(props.total_memory / 2**30, 1), integrated=integrated))
        if backend == "rocm" and any(g.integrated for g in info.gpus):
            from steadytune.unified_memory import card_for, read_drm_cards, usable_gib
            cards = read_drm_cards(sys_root)
            for gpu in info.gpus:
                if gpu.integrated:
                    gpu.usable_memory_gib, gpu.memory_note = usable_gib(gpu.memory_gib, card_for(cards, gpu.bus_id))
    return info


def _bus_id(props) -> Optional[str]:
    """PCI address from torch's device properties (pci_domain_id/pci_bus_id/pci_device_id), if it has them."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(p, int) for p in parts):
        return None
    domain, bus, device = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


# A valid LLVM target: gfx + 3 characters for gfx6-9 (gfx90a), + 4 for gfx10-12 (gfx1101).
_GFX_TARGET = re.compile(r"^gfx(?:[6-9][0-9a-f]{2}|1[0-2][0-9][0-9a-f])$")


def is_gfx_target(arch: str) -> bool:
    return bool(_GFX_TARGET.match(normalise_gfx(arch)))


def decode_rocm_smi_gfx(value: str) -> Optional[str]:
    """rocm-smi's "GFX Version" glues major, minor and stepping as decimals: gfx9010 is 9.0.10 = gfx90a,
    gfx11001 is 11.0.1 = gfx1101, while gfx1100 and gfx942 are already targets. -> the LLVM target or None."""
    match = re.fullmatch(r"gfx(\d+)", value.strip().lower())
    if not match:
        return value.strip().lower() if is_gfx_target(value) else None
    digits = match.group(1)
    major_len = 1 if digits[0] in "6789" else 2
    if len(digits) < major_len + 2:
        return None
    major, minor, stepping = digits[:major_len], digits[major_len], int(digits[major_len + 1:])
    if stepping > 15:
        return None
    target = f"gfx{major}{minor}{stepping:x}"
    return target if is_gfx_target(target) else None


def gfx_family(arch: str) -> str:
    """'gfx1101' -> 'gfx11', 'gfx90a' -> 'gfx9': the family an HSA override must stay within."""
    base = normalise_gfx(arch)
    match = re.match(r"gfx(1[0-2]|[6-9])", base)
    return f"gfx{match.group(1)}" if match else base


def bf16_verdict(arch: Optional[str]) -> tuple[Optional[bool], str]:
    """-> (native bf16?, why). None when the architecture is unknown."""
    if not arch:
        return None, "architecture unknown"
    base = normalise_gfx(arch)
    row = arch_info(base)
    if arch_supports_bf16(base):
        return True, f"{base}: native bf16 matrix math"
    if base == "gfx906":
        return False, "gfx906: no native bf16 (rocBLAS emulates it, slowly)"
    if base.startswith("gfx10"):
        return False, f"{base}: RDNA1/2 has no bf16 arithmetic (torch.cuda.is_bf16_supported() still says True)"
    if base.startswith("sm_"):
        return False, f"{base}: bf16 needs compute capability 8.0 (Ampere) or newer"
    return False, f"{base}: no native bf16" + (f" ({row.family})" if row else "")


# --- precision -------------------------------------------------------------------------------------------

# Families with native bf16 matrix math, for targets the arch table (gpu_facts.ARCHS) has no row for yet:
# CDNA1+ (gfx908, gfx90a, gfx94x, gfx95x), RDNA3+ (gfx11xx, gfx12xx). research/rocm.md section 5.
_BF16_GFX = re.compile(r"^gfx(908|90a|94\d|95\d|11\d\w|12\d\w)$")


def arch_supports_bf16(arch: str) -> bool:
    arch = arch.lower()
    if arch.startswith("gfx"):
        row = arch_info(arch)
        return row.bf16 if row is not None else bool(_BF16_GFX.match(normalise_gfx(arch)))
    match = re.match(r"sm_(\d+)", arch)
    return bool(match) and int(match.group(1)) >= 80  # Ampere and newer


def choose_precision(info: HardwareInfo, bf16: bool | str = "auto", fp16: bool | str = False) -> tuple[str, str]:
    """-> (dtype name for mixed precision: 'bf16' | 'fp16' | 'fp32', reason)."""
    gpu = info.primary
    if info.backend == "cpu" or gpu is None:
        if bf16 is True or fp16 is True:
            # LLaMA-Factory configs all say bf16: true; on a CPU that would only make the run slower
            # (CPU autocast) and less exact, so the same file runs in fp32 there, and says so.
            return "fp32", "no GPU: fp32 (the config's bf16/fp16: true applies on a GPU; CPU autocast is slower)"
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

class AttentionUnavailable(UserError, RuntimeError):
    """The attention kernel asked for cannot run here; a user error (one line, exit 1), not a crash."""


def flash_attn_status() -> tuple[bool, str]:
    """Whether flash-attn imports *and runs* here (a broken ROCm build imports fine and fails on first call)."""
    import torch
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


def peak_bf16_tflops(name: str) -> Optional[float]:
    """Dense bf16 peak of a GPU from its product name (for MFU), or None when the table does not know it."""
    product = lookup_product(name)
    return product.peak_bf16_tflops if product else None


def device_for(info: HardwareInfo) -> torch.device:
    import torch
    if info.backend in ("rocm", "cuda"):
        # The current device (each rank's own under Accelerate), unless device 0 is an iGPU enumerated before
        # the discrete GPU (rocm.md row 5): then the first discrete GPU.
        gpu = info.primary
        if gpu is not None and info.gpus and info.gpus[0].integrated:
            return torch.device("cuda", gpu.index)
        return torch.device("cuda")
    if info.backend == "mps":
        return torch.device("mps")
    return torch.device("cpu")


def choose_packing_attention(info: HardwareInfo, requested: str = "auto",
                             kernel_status: Optional[Callable[[], tuple[str | None, str]]] = None) -> tuple[str, str | None, str]:
    """-> (packing attention: varlen | sdpa | flex, varlen kernel name or None, reason). See packing.py.

    On a GPU, a variable-length flash kernel (flash-attn, else PyTorch's own) is used only after it has run
    and matched SDPA here; otherwise, and on CPU, SDPA with the block-diagonal mask.
    """
    if kernel_status is None:   # doctor --from passes its own: the saved machine's kernels cannot be run here
        from steadytune.packing import varlen_kernel_status as kernel_status
    if requested in ("sdpa", "flex"):
        return requested, None, f"{requested} was asked for"
    if info.backend in ("cuda", "rocm"):
        kernel, why = kernel_status()
        if kernel is not None:
            return "varlen", kernel, f"auto -> varlen: {why}; no padding, no masked-out blocks"
        if requested == "varlen":
            raise AttentionUnavailable(f"varlen packing attention was asked for, but {why}")
        return "sdpa", None, f"auto -> SDPA with a block-diagonal mask (no varlen kernel: {why})"
    if requested == "varlen":
        raise AttentionUnavailable("varlen packing attention needs a GPU; use sdpa")
    return "sdpa", None, f"auto -> SDPA with a block-diagonal mask ({info.backend}: no varlen kernel)"
