"""bitsandbytes saying it runs CPU-only beside a torch built for the CPU, on a machine with a GPU:
bitsandbytes follows torch, so torch's build is the cause and no bitsandbytes release changes it. bitsandbytes'
installation guide (https://huggingface.co/docs/bitsandbytes/main/en/installation). Split out of library_pages.py in
round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.facts import Fact
from steadytune.doctor.fixes import cuda_wheel_for, rocm_index_for
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _vendor, rule
from steadytune.hardware.gpu_facts import normalise_gfx


def _sm(ctx: Context) -> tuple[Optional[int], Optional[Fact]]:
    """The NVIDIA GPU's compute capability (sm_XY as XY) and the fact that names it."""
    for fact in ctx.sheet.of("arch"):
        m = re.fullmatch(r"sm_(\d+)", fact.value)
        if m:
            return int(m.group(1)), fact
    return None, None


_BNB_CPU = re.compile(r"bitsandbytes was compiled without GPU support|CPU-only version of bitsandbytes|"
                      r"bitsandbytes is running as CPU-only")


@rule("torch-build")
def bnb_cpu_only_under_cpu_torch(ctx: Context) -> Optional[Diagnosis]:
    """bitsandbytes says it runs CPU-only and the torch beside it is a +cpu build on a machine with a GPU: bitsandbytes
    follows torch, so torch's build is the cause, and upgrading bitsandbytes changes nothing."""
    said = _lines_matching(ctx, _BNB_CPU)
    if not said:
        return None
    cpu_torch = next((f for f in ctx.sheet.of("torch") if f.detail == "cpu" or "+cpu" in f.value), None)
    if cpu_torch is None:
        return None
    vendor = _vendor(ctx)
    cc, fact = _sm(ctx)
    if vendor == "amd":
        arch = next((normalise_gfx(f.value) for f in ctx.sheet.of("arch") if f.value.startswith("gfx")), None)
        index = rocm_index_for(arch)
    elif cc is not None:
        index = cuda_wheel_for(f"sm_{cc}") or "pip install torch --index-url https://download.pytorch.org/whl/cu128"
    else:
        return None
    return _first(_make("torch-build", "bitsandbytes is CPU-only because torch is a CPU build",
                        f"torch {cpu_torch.value} is built for the CPU, so bitsandbytes finds no GPU through it and "
                        "loads its CPU library; the 8-bit / 4-bit GPU kernels are missing whatever bitsandbytes "
                        "release is installed",
                        f"install torch's GPU build first: pip uninstall -y torch torchvision torchaudio; {index}; "
                        "python -c \"import torch; print(torch.cuda.is_available())\" must print True; then "
                        "python -m bitsandbytes must end in SUCCESS", [cpu_torch], said[:1]))
