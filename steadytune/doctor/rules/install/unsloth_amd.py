"""Unsloth finding no GPU on an AMD machine: the torch beside it is not a ROCm build. Unsloth's AMD
guide installs a ROCm torch first, then unsloth[amd] (https://unsloth.ai/docs/get-started/install/amd). Split out of
library_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import vendor_of
from steadytune.doctor.fixes import rocm_index_for
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
from steadytune.hardware.gpu_facts import normalise_gfx


_UNSLOTH_NO_GPU = re.compile(r"Unsloth cannot find any torch accelerator|Unsloth: No NVIDIA GPU found|"
                             r"Unsloth currently only works on NVIDIA, AMD and Intel GPUs")


@rule("torch-build")
def unsloth_amd_without_rocm_torch(ctx: Context) -> Optional[Diagnosis]:
    """Unsloth finding no GPU on an AMD machine: the torch beside it is not the ROCm build."""
    said = _lines_matching(ctx, _UNSLOTH_NO_GPU)
    # the machine's own facts say AMD (a Radeon / Instinct named, a gfx arch, ROCm): Unsloth's message names AMD itself
    amd = vendor_of(ctx.sheet) == "amd" or any(f.value.startswith("gfx") for f in ctx.sheet.of("arch")) or \
        ctx.sheet.has("rocm")
    if not said or not amd or any(a.startswith("sm_") for a in ctx.sheet.machine_archs):
        return None
    arch = next((normalise_gfx(f.value) for f in ctx.sheet.of("arch") if f.value.startswith("gfx")), None)
    return _first(_make("torch-build", "Unsloth finds no GPU: the torch on this AMD machine is not a ROCm build",
                        "Unsloth reaches the GPU through torch; a CUDA or CPU torch (what pip install unsloth pulls "
                        f"from PyPI) sees no AMD GPU{' (' + arch + ')' if arch else ''}, so Unsloth stops",
                        f"pip uninstall -y torch torchvision torchaudio; {rocm_index_for(arch)} (python -c \"import "
                        "torch; print(torch.version.hip, torch.cuda.is_available())\" must print a ROCm version and "
                        "True); then pip install \"unsloth[amd]\" (its AMD extra brings the ROCm bitsandbytes), as "
                        "Unsloth's AMD guide installs it", [], said[:1]))
