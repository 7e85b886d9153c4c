"""Old GCN cards (gfx6xx-gfx8xx, no rules): their generation, and the ROCm of their era, which still built them."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context


def _gcn_generation(arch: Optional[str]) -> Optional[str]:
    """The GCN generation of a pre-Vega arch, as AMD's documents name it (LLVM AMDGPUUsage: gfx6 Southern Islands,
    gfx7 Sea Islands, gfx8 Volcanic Islands / Polaris)."""
    if not _is_old_gfx(arch):
        return None
    return {"6": "GFX6 (GCN 1, Southern Islands)", "7": "GFX7 (GCN 2, Sea Islands)",
            "8": "GFX8 (GCN 3/4: Fiji, Polaris)"}[arch[3]]


def _is_old_gfx(arch: Optional[str]) -> bool:
    """GCN 1-4 (gfx6xx-gfx8xx): outside every ROCm 6 and 7 release."""
    return bool(arch) and arch.startswith("gfx") and len(arch) == 6 and arch[3] in "678"


# The last ROCm release whose libraries were still built for an old GCN arch: gfx803 (Fiji, Polaris) was listed
# through ROCm 3.x and still enabled in the 4.x builds before 4.5 (torch built with PYTORCH_ROCM_ARCH=gfx803 ran on
# ROCm 4.0: pytorch #53738); ROCm 5 left it out (rocm-arch #901, an RX 560 under ROCm 5.3). The same bound as the
# platform family's PCIe-atomics reading (machine/platform.py)
_LAST_ROCM_OF_OLD = {"gfx803": (4, 3)}
# Distributions that only ROCm 4 and older install on (16.04 left the supported list with ROCm 4.x): a paste from
# one of them runs such a ROCm
_OLD_ERA_UBUNTU = ("14.04", "16.04")


def _rocm_of_its_era(ctx: Context, arch: Optional[str]) -> Optional[str]:
    """The ROCm the paste runs, where it is one that still built this old arch: the versions it names (all of them
    older than the last that carried the arch), else a distribution or kernel that no ROCm 6 or 7 installs on.
    The reason the card fails there is not "outside ROCm": that release had its code."""
    last = _LAST_ROCM_OF_OLD.get(arch or "")
    if last is None or ctx.of("gpu-unsupported"):
        return None
    versions = []
    for value in ctx.sheet.values("rocm"):
        m = re.match(r"(\d+)\.(\d+)", value)
        if m:
            versions.append((int(m.group(1)), int(m.group(2))))
    if versions:
        newest = max(versions)
        return f"ROCm {newest[0]}.{newest[1]}" if newest <= last else None
    ubuntu = next((f.detail for f in ctx.sheet.of("os") if f.value == "ubuntu" and f.detail in _OLD_ERA_UBUNTU), None)
    if ubuntu:
        return f"Ubuntu {ubuntu} (only ROCm 4 and older install there)"
    # a kernel older than 4.15 (Ubuntu 18.04's) is from the same years
    kernel = next((k for k in ctx.sheet.values("kernel") if re.match(r"3\.|4\.(?:\d|1[0-4])\.", k)), None)
    return f"Linux {kernel} (only ROCm 4 and older run on it)" if kernel else None
