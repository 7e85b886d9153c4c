"""GPU architectures: valid gfx targets, rocm-smi's glued version numbers, families, and native bf16.

bf16 is decided from the GPU architecture, never from `torch.cuda.is_bf16_supported()` alone: on ROCm that
call answers True on RDNA1/2 (gfx10xx), which has no native bf16 arithmetic (research/rocm.md section 5).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.hardware.gpu_facts import arch_info, normalise_gfx

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
