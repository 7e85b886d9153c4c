"""tinygrad's AMD backend refusing a GPU ("Unsupported arch: gfx906"): AMD=1 drives the GPU through tinygrad's own
userspace driver over KFD, written for a few generations only, while its HIP backend (HIP=1) goes through ROCm's HIP
runtime and runs on what ROCm runs. Not a build to make: the backend to select."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
from steadytune.hardware.gpu_facts import arch_info, override_for_arch

# tinygrad/runtime/ops_amd.py: in late 2024 "if self.target < 100300 or self.target >= 120000: raise RuntimeError(
# f'Unsupported arch: {self.arch}')" (gfx1030 to gfx11xx); now an assert for gfx942, gfx950, gfx11xx and gfx12xx.
# tinygrad/runtime/ops_hip.py loads code through libamdhip64 (hipModuleLoadData) for the device's gcnArchName.
_REFUSED = re.compile(r"(?i)\bunsupported arch:? ?(gfx[0-9a-f]{3,4})\b")


@rule("arch-missing")
def tinygrad_amd_backend(ctx: Context) -> Optional[Diagnosis]:
    if "tinygrad" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _REFUSED)
    if not said:
        return None
    named = [m.group(1).lower() for line in said for m in [_REFUSED.search(line.line)]]
    # a retyped title may misspell the arch (gfx096): the one the arch table knows is the tool's own
    arch = next((a for a in reversed(named) if arch_info(a) is not None), named[-1])
    value = override_for_arch(arch)
    override = (f" (where ROCm itself lacks {arch}, with HSA_OVERRIDE_GFX_VERSION={value})" if value else "")
    return _first(_make(
        "arch-missing", f"tinygrad's AMD backend does not drive {arch}",
        f"AMD=1 selects tinygrad's own driver over KFD, which is written for a few GPU generations (RDNA3/RDNA4 and "
        f"CDNA3 in current releases; gfx1030 to gfx11xx in late-2024 ones) and refuses {arch}",
        f"{arch} is outside tinygrad's AMD backend: use its HIP backend instead, HIP=1, with AMD=1 (and GPU=1) unset, e.g. HIP=1 python ... "
        f"(it runs through ROCm's HIP runtime, on the GPUs ROCm runs{override}); check with "
        "HIP=1 python -c 'from tinygrad import Device; print(Device.DEFAULT)'", [], said))
