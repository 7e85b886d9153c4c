"""conda's __cuda virtual package missing where a CUDA build is asked for: conda (mamba, micromamba) sets __cuda to
the CUDA the display driver supports, so on a machine whose driver it cannot see (an HPC login node without GPUs, a
container build, a CI runner) the solver refuses every CUDA build ("__cuda =* *, which is missing on the system",
"nothing provides __cuda"). The environment variable CONDA_OVERRIDE_CUDA sets the virtual package by hand, so the CUDA
build installs there and runs on the GPU nodes.

Sources: conda's "Managing virtual packages" (__cuda: the maximum CUDA version the display driver supports; the
CONDA_OVERRIDE_CUDA override), conda-forge's CUDA page ("Installing CUDA packages without a GPU", HPC login nodes).
Mined from conda-forge/pytorch-cpu-feedstock#364 (round 18, r18c)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_MISSING = re.compile(r"(?i)__cuda\b[^\n]{0,40}missing on the system|nothing provides (?:requested )?__cuda\b|"
                      r"requires? __cuda\b[^\n]{0,40}(?:missing|not available|could not be found)")
_INSTALL = re.compile(r"(?i)\b((?:micro)?mamba|conda)\s+(?:install|create|env create)\b[^\n`]*")


@rule("wheel-platform")
def conda_cuda_virtual_package_missing(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _MISSING)
    if not lines:
        return None
    text = _text(ctx)
    driver = [f.value for f in ctx.sheet.of("cuda") if re.search(r"CUDA (?:UMD )?Version:", f.line)]
    asked = re.search(r"(?i)=cuda(\d{2})", text) or re.search(r"(?i)\bcuda-version[= ]+(\d{2})", text)
    value = driver[-1] if driver else f"{asked.group(1)}.0" if asked else "12.0"
    install = _INSTALL.search(text)
    command = install.group(0).strip().rstrip("`.,") if install else "conda install ..."
    if command.count('"') % 2:
        command = command.rstrip('"') if command.endswith('"') else command + '"'
    if command.count("'") % 2:
        command = command.rstrip("'") if command.endswith("'") else command + "'"
    return _make("wheel-platform", "conda sees no CUDA driver on this machine",
                 "conda's __cuda virtual package stands for the CUDA the display driver supports; this machine shows "
                 "it none (no GPU or driver here, such as a login node or a container build), so the solver refuses "
                 "every CUDA build",
                 f"set the virtual package by hand for the solve: CONDA_OVERRIDE_CUDA={value} {command} (the value "
                 "is the CUDA the GPU nodes' driver reports in nvidia-smi; conda info lists __cuda once it is set); "
                 "on a machine that has the GPU, nvidia-smi must work there first", [ctx.line_fact(lines[0])], lines[:1])
