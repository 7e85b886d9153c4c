"""A PyTorch CUDA extension that ships prebuilt wheels only up to some GPU generation (pytorch3d's and its community
builders' wheels, per torch and CUDA) on a Blackwell GPU (sm_100 / sm_120): no wheel carries its code, and the torch
the prebuilt wheels were made for (cu126 or older) has none either. The way that works is a torch with CUDA 12.8 or
newer, then the extension built from its source against that torch, for the GPU's arch.

Decided by: a Blackwell GPU among the paste's GPUs, and an extension of _SOURCES named with its wheels (a wheel index
or "+ptX.Ycu" local version, "support", a prebuilt package); a torch nightly said in the paste keeps the nightly index.
Sources: facebookresearch/pytorch3d#1962 (RTX 5090: the cu128 nightly torch, then pytorch3d built from a clone with pip
install -e .); pytorch3d's INSTALL.md (building from source: git clone, pip install -e .); fixes.cuda_wheel_for
(Blackwell needs CUDA 12.8 or newer)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


# extension -> its source repository (its INSTALL / README's build from a clone)
_SOURCES = {
    "pytorch3d": "https://github.com/facebookresearch/pytorch3d",
}


@rule("arch-missing")
def extension_wheels_before_blackwell(ctx: Context) -> Optional[Diagnosis]:
    blackwell = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_1[02]\d", a)]
    if not blackwell:
        return None
    text = _text(ctx)
    package = next((p for p in _SOURCES if re.search(rf"(?i)\b{p}\b", text)), None)
    if package is None:
        return None
    # its prebuilt packages in play (a wheel index, a +ptX.YcuZ build, conda's package) or the GPU's support asked
    # about / refused: not a source build of the user's own that failed otherwise
    if not re.search(r"(?i)\bwheels?\b|\+pt\d|--(?:extra-)?index-url|\s-f\s+https?:|conda install|\bsupport|"
                     r"no kernel image", text):
        return None
    lines = _lines_matching(ctx, re.compile(rf"(?i)\b{package}\b"))
    cc = blackwell[0][3:]
    arch = f"{int(cc) // 10}.{int(cc) % 10}"
    nightly = bool(re.search(r"(?i)\bnightly\b|\.dev20\d{6}|--pre\b", text))
    index = ("pip install --pre torch torchvision --index-url https://download.pytorch.org/whl/nightly/cu128" if nightly
             else "pip install torch torchvision --index-url https://download.pytorch.org/whl/cu128")
    return _first(_make(
        "arch-missing", f"no prebuilt {package} carries the {blackwell[0]} GPU's code",
        f"{package}'s prebuilt wheels are built per torch and CUDA for the GPU generations of their time; none has "
        f"{blackwell[0]} (Blackwell needs CUDA 12.8 or newer), and the torch they were made for has no code for it either",
        f"install a torch with CUDA 12.8: {index}; then build {package} from its source against it: git clone "
        f"{_SOURCES[package]}; cd {package}; export TORCH_CUDA_ARCH_LIST=\"{arch}\" FORCE_CUDA=1; pip install -e . "
        f"--no-build-isolation (the CUDA 12.8 toolkit's nvcc on PATH); python -c 'import {package}' must then load",
        [ctx.line_fact(lines[0])], lines[:1]))
