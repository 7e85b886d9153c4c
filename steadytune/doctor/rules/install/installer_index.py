"""An installer that picks torch's CUDA index from nvidia-smi and fell back to a default: it could not read the CUDA
version (driver 610's nvidia-smi prints "CUDA UMD Version" where older ones print "CUDA Version", and a pattern for
the old wording finds nothing), so it installed the default index's torch, which can be older than the driver and the
GPU need (an RTX 50 needs CUDA 12.8 or newer). The fix is the index the driver's own CUDA allows, installed by hand
into the installer's environment, until the installer reads the new wording.

Sources: the driver's CUDA -> pytorch.org index (base._cuda_index_for_driver: cu130 from torch 2.9 for a CUDA 13
driver, cu128 for 12.8 and newer); unslothai/unsloth#5812 (install.ps1's regex fixed on main to match "CUDA UMD
Version") (round 18, r18c)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _cuda_index_for_driver, _lines_matching, _make, rule

_FELL_BACK = re.compile(r"(?i)(?:could not|couldn'?t|cannot|can'?t|unable to|failed to) (?:determine|detect|read|parse|"
                        r"find) (?:the )?CUDA version[^\n]*?(?:defaulting|falling back|fall(?:ing)? back|default) to "
                        r"(cu\d{3}|cpu)")


@rule("wheel-platform")
def installer_fell_back_to_a_default_index(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _FELL_BACK)
    if not lines:
        return None
    default = _FELL_BACK.search(lines[0].line).group(1)
    arch, _fact = ctx.arch()
    driver = [f for f in ctx.sheet.of("cuda") if re.search(r"CUDA (?:UMD )?Version:", f.line)]
    index = _cuda_index_for_driver(ctx, arch)
    label = re.search(r"whl/(cu\d+)", index)
    if label is None or label.group(1) == default:
        return None
    how = (f"nvidia-smi shows CUDA {driver[-1].value}" if driver else "the GPU needs a newer CUDA build")
    return _make("wheel-platform", f"the installer fell back to the {default} index",
                 f"the installer could not read the CUDA version from nvidia-smi (newer drivers print it as \"CUDA UMD "
                 f"Version\") and installed torch from its default {default} index; {how}, so the torch installed is "
                 "older than the driver allows, and may lack the GPU's code",
                 f"install torch from the driver's index into the installer's environment: pip uninstall torch "
                 f"torchvision torchaudio -y; {index.replace('pip install torch ', 'pip install torch torchvision torchaudio ', 1)}; "
                 "or update the installer to a release that reads the new nvidia-smi wording and run it again",
                 [ctx.line_fact(lines[0])] + driver[-1:], lines[:1])
