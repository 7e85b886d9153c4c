"""torch.utils.cpp_extension refusing an arch of TORCH_CUDA_ARCH_LIST: "ValueError: Unknown CUDA arch (9.0+PTX) or GPU
not supported". The list (exported by the user, a Dockerfile or the project's setup.py) names a compute capability that
the torch doing the build, or the CUDA toolkit it compiles with, does not know - 9.0 for a CUDA 11.7 nvcc. The build
needs the list cut to what the toolkit compiles: each standard data-centre / desktop arch up to the newest this nvcc
knows, the last with +PTX so newer GPUs JIT from it.

Decided by: the cpp_extension message with the arch it refused, and the nvcc release of the paste ("Cuda compilation
tools, release 11.7") where there is one. The newest arch per toolkit is cuda_builds' _NVCC_FIRST (NVIDIA's CUDA
release notes); OpenBMB/BMTrain#83: the maintainer's TORCH_CUDA_ARCH_LIST="6.0 6.1 7.0 7.5 8.0 8.6+PTX" for CUDA 11.7.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.cuda_builds import _NVCC_FIRST, _NVCC_OLDEST
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_UNKNOWN = re.compile(r"(?i)Unknown CUDA arch \((\d{1,2}\.\d)[a-z]?(?:\+PTX)?\) or GPU not supported")
_NVCC = re.compile(r"(?i)Cuda compilation tools, release (\d{2})\.(\d)|\bnvcc\b.{0,30}\bV?(\d{2})\.(\d)\b|"
                   r"\bCUDA(?:\s+toolkit)?\s*v?(\d{2})\.(\d)\b")
# the archs a general build lists (not the Jetson-only 7.2 / 8.7 / 11.0, nor the 10.1 / 10.3 / 12.1 variants)
_STANDARD = ("50", "52", "60", "61", "70", "75", "80", "86", "89", "90", "100", "120")


def _first_release(cc: str) -> tuple[int, int]:
    m = re.search(r"CUDA (\d+)\.(\d)", _NVCC_FIRST.get(cc, "CUDA 9.0"))
    return int(m.group(1)), int(m.group(2))


def arch_list_for(release: tuple[int, int]) -> list[str]:
    """The standard archs a CUDA release's nvcc compiles, oldest first (from 6.0; CUDA 13 from 7.5)."""
    oldest = max(60, _NVCC_OLDEST.get(release[0], 35))
    return [cc for cc in _STANDARD if int(cc) >= oldest and _first_release(cc) <= release]


@rule("arch-missing")
def arch_list_beyond_the_toolkit(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _UNKNOWN)
    if not lines:
        return None
    refused = _UNKNOWN.search(lines[0].line).group(1)
    text = _text(ctx)
    m = _NVCC.search(text)
    release = tuple(int(g) for g in m.groups() if g is not None)[:2] if m else None
    cc = refused.replace(".", "")
    if release:
        archs = arch_list_for(release)
        listed = " ".join(f"{int(a) // 10}.{int(a) % 10}" for a in archs) + "+PTX"
        toolkit = f"CUDA {release[0]}.{release[1]}"
        beyond = _first_release(cc) > release if cc in _NVCC_FIRST else True
        said = (f"{refused} is newer than the {toolkit} compiler (it first comes with {_NVCC_FIRST[cc]})" if beyond and
                cc in _NVCC_FIRST else f"the torch doing the build (or {toolkit}) does not know {refused}")
        fix = (f"export TORCH_CUDA_ARCH_LIST=\"{listed}\" (the archs {toolkit} compiles, the newest with +PTX; drop "
               f"{refused}) and rebuild from a clean tree (pip install --no-build-isolation --no-cache-dir .); if the "
               f"GPU itself is compute capability {refused}, install {_NVCC_FIRST.get(cc, 'a newer CUDA toolkit')} or "
               "newer and a torch built with it instead")
    else:
        said = f"the torch doing the build, or its CUDA toolkit, does not know {refused}"
        fix = (f"set TORCH_CUDA_ARCH_LIST without {refused}: only the archs your nvcc compiles (nvcc --list-gpu-arch "
               "lists them), the newest with +PTX, e.g. export TORCH_CUDA_ARCH_LIST=\"7.0 7.5 8.0 8.6+PTX\", and rebuild "
               "from a clean tree")
    return _first(_make(
        "arch-missing", f"TORCH_CUDA_ARCH_LIST asks for {refused}, which this build cannot compile",
        f"torch's cpp_extension turns every arch of TORCH_CUDA_ARCH_LIST (or the list the project's setup.py sets) into "
        f"nvcc flags and refuses one it does not know: {said}", fix, [ctx.line_fact(lines[0])], lines[:1]))
