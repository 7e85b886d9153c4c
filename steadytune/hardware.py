"""Hardware facts and the policy built on them: which backend, which GPU architecture, which dtype, which
attention. `doctor` reports these decisions and `train` obeys them, so both read this one module.

bf16 is decided from the GPU architecture, never from `torch.cuda.is_bf16_supported()` alone: on ROCm that
call answers True on RDNA1/2 (gfx10xx), which has no native bf16 arithmetic (research/rocm.md section 5).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Optional

from steadytune.errors import UserError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that need it: the tables and arch rules below also serve
# `steadytune doctor --from` on saved tool outputs, which must work where torch itself does not import.


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
    import torch
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def detect() -> HardwareInfo:
    """What this process can use, as torch sees it (after *_VISIBLE_DEVICES have been applied)."""
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
            info.gpus.append(GPU(index=i, name=props.name, arch=arch,
                                 memory_gib=round(props.total_memory / 2**30, 1), integrated=integrated))
    return info


def normalise_gfx(arch: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a' (rocminfo and gcnArchName append target features)."""
    return arch.split(":")[0].strip().lower()


# --- GPU tables: product name / PCI device id -> architecture -------------------------------------------
# Read by doctor (offline outputs name the product, not always the arch) and by bench (peak TFLOPs for MFU).

@dataclass(frozen=True)
class Product:
    pattern: str                        # regex, searched case-insensitively in the product name
    arch: str                           # gfx target (AMD) or sm_XY (NVIDIA)
    integrated: bool = False            # APU / iGPU: listed, not chosen for training
    peak_bf16_tflops: Optional[float] = None  # dense, per device as torch sees it (one MI250X GCD), vendor datasheet


# Order matters: the first match wins, so specific names come before family names.
PRODUCTS: tuple[Product, ...] = (
    # AMD Instinct (CDNA)
    Product(r"MI355X", "gfx950", peak_bf16_tflops=2516.6),
    Product(r"MI350", "gfx950", peak_bf16_tflops=2306.9),
    Product(r"MI325X", "gfx942", peak_bf16_tflops=1307.4),
    Product(r"MI308X", "gfx942"),
    Product(r"MI300A", "gfx942", peak_bf16_tflops=980.6),
    Product(r"MI300X|MI300\b", "gfx942", peak_bf16_tflops=1307.4),
    Product(r"MI250X", "gfx90a", peak_bf16_tflops=191.5),   # per GCD; one card = 2 devices
    Product(r"MI250|MI200", "gfx90a", peak_bf16_tflops=181.0),
    Product(r"MI210", "gfx90a", peak_bf16_tflops=181.0),
    Product(r"MI100|Arcturus", "gfx908", peak_bf16_tflops=92.3),
    Product(r"MI50|MI60|Radeon (Pro )?VII|Vega 20", "gfx906"),
    Product(r"MI25|Vega ?10|Vega (56|64)|Radeon RX Vega", "gfx900"),
    Product(r"Fiji|FURY|R9 Nano", "gfx803"),
    # AMD Radeon (RDNA) discrete
    Product(r"Navi 4[48]|RX 90[67]0", "gfx1201"),
    Product(r"Navi 33|RX 7600|W7600|W7500", "gfx1102"),
    Product(r"Navi 32|RX 7[78]00|W7700", "gfx1101"),
    Product(r"Navi 31|RX 7900|W7900|W7800", "gfx1100"),
    Product(r"Navi 24|RX 6[45]00", "gfx1034"),
    Product(r"Navi 23|RX 6600|W6600", "gfx1032"),
    Product(r"Navi 22|RX 67[05]0", "gfx1031"),
    Product(r"Navi 21|RX 6[89][05]0|W6800", "gfx1030"),
    Product(r"Navi 1[04]|RX 5[67]00", "gfx1010"),
    # AMD integrated (APU) graphics
    Product(r"Strix Halo|Radeon 80[56]0S", "gfx1151", integrated=True),
    Product(r"Strix|Radeon 8[89]0M", "gfx1150", integrated=True),
    Product(r"Phoenix|Hawk Point|Radeon 7[46]0M", "gfx1103", integrated=True),
    Product(r"Raphael|Granite Ridge", "gfx1036", integrated=True),
    Product(r"Rembrandt|Radeon 6[68]0M", "gfx1035", integrated=True),
    Product(r"Renoir|Cezanne|Lucienne|Barcelo", "gfx90c", integrated=True),
    # NVIDIA
    Product(r"B200|B100|GB200", "sm_100", peak_bf16_tflops=2250.0),
    Product(r"RTX 50\d0|RTX PRO 6000", "sm_120"),
    Product(r"H200|GH200", "sm_90", peak_bf16_tflops=989.4),
    Product(r"H100.*PCIe", "sm_90", peak_bf16_tflops=756.5),
    Product(r"H100|H800", "sm_90", peak_bf16_tflops=989.4),
    Product(r"L40S", "sm_89", peak_bf16_tflops=362.1),
    Product(r"RTX 4090", "sm_89", peak_bf16_tflops=165.2),
    Product(r"L40|L4\b|RTX 40\d0|RTX 6000 Ada|Ada Generation", "sm_89"),
    Product(r"A100|A800", "sm_80", peak_bf16_tflops=312.0),
    Product(r"A30\b", "sm_80", peak_bf16_tflops=165.0),
    Product(r"A10\b|A40\b|RTX 30\d0|RTX A\d000", "sm_86"),
    Product(r"T4\b|RTX 20\d0|Quadro RTX|TITAN RTX|GTX 16\d0", "sm_75"),
    Product(r"V100|TITAN V", "sm_70"),
    Product(r"P100", "sm_60"),
)

# PCI device id -> product name, for outputs that show only the id (rocm-smi concise, rocm-smi -a, rocminfo Chip ID).
AMD_DEVICE_IDS: dict[int, str] = {
    0x74A1: "AMD Instinct MI300X", 0x74A5: "AMD Instinct MI325X", 0x74A0: "AMD Instinct MI300A",
    0x74A2: "AMD Instinct MI308X", 0x75A0: "AMD Instinct MI350X", 0x75A3: "AMD Instinct MI355X",
    0x7408: "AMD Instinct MI250X", 0x740C: "AMD Instinct MI250X/MI250", 0x740F: "AMD Instinct MI210",
    0x738C: "AMD Instinct MI100", 0x738E: "AMD Instinct MI100", 0x66A0: "AMD Instinct MI50/MI60 (Vega 20)",
    0x66A1: "AMD Instinct MI50/MI60 (Vega 20)", 0x66AF: "AMD Radeon VII", 0x687F: "Vega 10",
    0x7300: "Fiji", 0x73BF: "Navi 21", 0x73DF: "Navi 22", 0x73FF: "Navi 23", 0x744C: "Navi 31",
    0x747E: "Navi 32", 0x7480: "Navi 33", 0x7550: "Navi 48", 0x164E: "Raphael", 0x15BF: "Phoenix",
    0x1681: "Rembrandt", 0x150E: "Strix", 0x1586: "Strix Halo",
}

# A valid LLVM target: gfx + 3 characters for gfx6-9 (gfx90a), + 4 for gfx10-12 (gfx1101).
_GFX_TARGET = re.compile(r"^gfx(?:[6-9][0-9a-f]{2}|1[0-2][0-9][0-9a-f])$")

# Archs the pytorch.org ROCm wheels ship code objects for (research/rocm.md section 2, row 3). Others need
# HSA_OVERRIDE_GFX_VERSION or a custom build; the live check asks torch.cuda.get_arch_list() instead.
OFFICIAL_WHEEL_ARCHS = frozenset({"gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950",
                                  "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201"})


def lookup_product(name: str = "", device_id: Optional[int] = None) -> Optional[Product]:
    """The table row for a product name (or, failing that, a PCI device id); None if unknown."""
    candidates = [name] if name else []
    if device_id is not None and device_id in AMD_DEVICE_IDS:
        candidates.append(AMD_DEVICE_IDS[device_id])
    for text in candidates:
        for product in PRODUCTS:
            if re.search(product.pattern, text, re.IGNORECASE):
                return product
    return None


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


def override_for_arch(arch: str) -> Optional[str]:
    """The HSA_OVERRIDE_GFX_VERSION value people use to run an unlisted consumer arch on a listed one's code."""
    base = normalise_gfx(arch)
    if base.startswith("gfx103"):
        return "10.3.0"
    if base.startswith("gfx110") or base == "gfx1151":   # reported working for gfx1151, failing for gfx1150
        return "11.0.0"
    return None


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
    if arch_supports_bf16(base):
        return True, f"{base}: native bf16 matrix math"
    if base == "gfx906":
        return False, "gfx906: no native bf16 (rocBLAS emulates it, slowly)"
    if base.startswith("gfx10"):
        return False, f"{base}: RDNA1/2 has no bf16 arithmetic (torch.cuda.is_bf16_supported() still says True)"
    if base.startswith("sm_"):
        return False, f"{base}: bf16 needs compute capability 8.0 (Ampere) or newer"
    return False, f"{base}: no native bf16"


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


def choose_packing_attention(info: HardwareInfo, requested: str = "auto") -> tuple[str, str | None, str]:
    """-> (packing attention: varlen | sdpa | flex, varlen kernel name or None, reason). See packing.py.

    On a GPU, a variable-length flash kernel (flash-attn, else PyTorch's own) is used only after it has run
    and matched SDPA here; otherwise, and on CPU, SDPA with the block-diagonal mask.
    """
    from steadytune.packing import varlen_kernel_status
    if requested in ("sdpa", "flex"):
        return requested, None, f"{requested} was asked for"
    if info.backend in ("cuda", "rocm"):
        kernel, why = varlen_kernel_status()
        if kernel is not None:
            return "varlen", kernel, f"auto -> varlen: {why}; no padding, no masked-out blocks"
        if requested == "varlen":
            raise AttentionUnavailable(f"varlen packing attention was asked for, but {why}")
        return "sdpa", None, f"auto -> SDPA with a block-diagonal mask (no varlen kernel: {why})"
    if requested == "varlen":
        raise AttentionUnavailable("varlen packing attention needs a GPU; use sdpa")
    return "sdpa", None, f"auto -> SDPA with a block-diagonal mask ({info.backend}: no varlen kernel)"
