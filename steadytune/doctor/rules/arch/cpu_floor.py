"""An inference app that offers only its failsafe (no-AVX) mode: koboldcpp picks its failsafe build when the CPU lacks
AVX/AVX2, and its GPU backends stay out when the GPU is below them (a Fermi card: compute capability 2.0, under every
CUDA 12 build; Vulkan listing only llvmpipe, the software renderer, has no GPU driver). Old hardware, not a setting:
the fix is what the machine can run, or newer hardware."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_ONLY_FAILSAFE = re.compile(r"(?i)\bonly\b[^\n]{0,40}\bfail ?safe\b|\bfail ?safe\b[^\n]{0,40}\bonly\b|"
                            r"\bonly\b[^\n]{0,30}\bno ?avx2?\b")
# a GPU older than any CUDA 12 or Vulkan driver: Fermi and Tesla-generation names
_FERMI = re.compile(r"(?i)\b(?:tesla )?[CM]20[57][05]\b|\bfermi\b|\bGTX ?[45]\d0\b|\bQuadro [456]000\b")


@rule("gpu-unsupported")
def only_failsafe_mode(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _ONLY_FAILSAFE.pattern)[:1]
    if not said or any(e.family is not None for e in ctx.errors):
        return None
    text = _text(ctx)
    fermi = _FERMI.search(text)
    gpu = (f" The {fermi.group(0)} is a Fermi GPU (compute capability 2.x): CUDA 12 builds start at 5.0 and it has no "
           "Vulkan driver (Vulkan finding only llvmpipe is the CPU's software renderer), so no GPU backend can use "
           "it." if fermi else
           " A Vulkan device list with only llvmpipe means no GPU Vulkan driver is installed." if
           re.search(r"(?i)\bl[lv]+mpipe\b", text) else "")
    return _make("gpu-unsupported", "a CPU without AVX (failsafe mode only)",
                 "koboldcpp's failsafe mode is its build for CPUs without AVX/AVX2; it is the only one offered when "
                 "the CPU lacks them (first-generation Core/Xeon and older)." + gpu,
                 "the CPU has no AVX/AVX2 (check: grep -o -w 'avx2\\|avx' /proc/cpuinfo | sort -u, or CPU-Z on "
                 "Windows), so only failsafe CPU mode runs: use it, or newer hardware (a CPU with AVX2; for a GPU "
                 "backend a card of compute capability 5.0 or newer, or any Vulkan GPU with its driver)",
                 [], said, confirmed=False)
