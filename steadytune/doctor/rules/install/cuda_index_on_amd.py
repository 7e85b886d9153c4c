"""torch installed from one of pytorch.org's CUDA indexes (whl/cu124, whl/nightly/cu124) on a machine whose GPU is
AMD (torch-build): the CUDA build never sees an AMD GPU, and pip's install over an earlier ROCm attempt leaves the
two builds' packages mixed in one environment (torch from one index, torchvision or torchaudio from the other), so
the errors that follow still read like ROCm's ("No HIP GPUs are available"). The answer is a fresh environment and the
ROCm index, and the ROCm index chosen is the one that carries the torch releases of the CUDA index the user picked
(cu124: torch 2.4-2.6, all on rocm6.1), so what the user's program needs of torch stays the same.

Facts: pytorch.org/get-started/previous-versions (the CUDA labels of each release: torch_cuda._TORCH_RELEASES_OF;
the ROCm labels: fixes.TORCH_ROCM_INDEXES); Comfy-Org/ComfyUI#5138 (an RX 6600 given the cu124 nightly after a ROCm
attempt: a fresh venv with the rocm6.1 index ran). ZLUDA runs torch's CUDA build on an AMD GPU by design, and Windows
has no pytorch.org ROCm build: both are other readings.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import TORCH_ROCM_INDEXES, rocm_index_for
from steadytune.doctor.rules.base import (Context, Diagnosis, NOT_DETECTED, _first, _lines_matching, _make, _nvidia_gpu,
                                          on_windows, _text, rule)
from steadytune.doctor.rules.install.torch_cuda import torch_releases_of
from steadytune.hardware.gpu_facts import override_for_arch

_CUDA_INDEX = re.compile(r"\bpip3?\b.{0,200}?download\.pytorch\.org/whl/(nightly/)?(cu\d{3})\b")
# the program not reaching the GPU: torch's own words (either build's), or the user's
_NO_GPU = re.compile(r"(?i)No HIP GPUs are available|No CUDA GPUs are available|Found no NVIDIA driver|Torch not compiled "
                     r"with CUDA|is_available\(\)[^\n]{0,30}\bFalse\b|\bnot compatible\b|" + NOT_DETECTED.removeprefix("(?i)"))


def rocm_index_of_the_same_torch(label: str) -> Optional[str]:
    """The pytorch.org ROCm index that carries every torch release the CUDA index `label` carries (cu124, torch 2.4-2.6:
    rocm6.1); else the newest ROCm index of its last release; None for an open-ended label (cu128: any torch since)."""
    try:
        first, last = torch_releases_of(label)
    except KeyError:
        return None
    if last[0] >= 99:
        return None
    releases = [r for r in sorted(TORCH_ROCM_INDEXES) if first <= r <= last]
    if not releases:
        return None
    common = set(TORCH_ROCM_INDEXES[releases[0]]).intersection(*(TORCH_ROCM_INDEXES[r] for r in releases[1:]))
    ordered = [i for r in releases for i in TORCH_ROCM_INDEXES[r]]
    if common:
        return max(common, key=ordered.index)
    return TORCH_ROCM_INDEXES[releases[-1]][-1]


@rule("torch-build")
def cuda_index_on_an_amd_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a pip line from a pytorch.org CUDA index, an AMD GPU named and no NVIDIA one, Linux (not ZLUDA),
    and the program said not to reach the GPU."""
    text = _text(ctx)
    installs = _lines_matching(ctx, _CUDA_INDEX)
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    if not installs or not archs or _nvidia_gpu(ctx) or on_windows(ctx, text) or re.search(r"(?i)\bzluda\b", text):
        return None
    said = _lines_matching(ctx, _NO_GPU)
    if not said:
        return None
    found = _CUDA_INDEX.search(installs[-1].line)
    label, nightly = found.group(2), bool(found.group(1))
    arch = archs[0]
    index = rocm_index_of_the_same_torch(label)
    value = override_for_arch(arch)
    if index is None or re.match(r"gfx12", arch):
        # (an open-ended label, or an RDNA4 card, whose code only the newest ROCm indexes carry)
        install = rocm_index_for(arch)
        where = "the current ROCm index"
    else:
        install = f"pip install torch torchvision torchaudio --index-url https://download.pytorch.org/whl/{index}"
        if value:
            install += f", then export HSA_OVERRIDE_GFX_VERSION={value} ({arch} runs its sibling's code)"
        first, last = torch_releases_of(label)
        where = (f"{index}, the ROCm index of the torch releases {label} carries ({first[0]}.{first[1]}-{last[0]}."
                 f"{last[1]})")
    return _first(_make(
        "torch-build", f"torch from the {label} (CUDA) index on an AMD GPU",
        f"pip installed torch's CUDA {'nightly ' if nightly else ''}build ({label}), which cannot use the AMD GPU "
        f"({arch}); installed over an earlier ROCm attempt it leaves the two builds' packages mixed in one environment, "
        "so the errors can still read like ROCm's",
        f"start from a fresh environment (python -m venv venv; source venv/bin/activate; or pip uninstall -y torch "
        f"torchvision torchaudio until pip list shows none), then the ROCm build from {where}: {install}; "
        "python -c 'import torch; print(torch.version.hip, torch.cuda.is_available())' must print a ROCm version "
        "and True", [ctx.line_fact(installs[-1])], said[:1] + installs[-1:]))
