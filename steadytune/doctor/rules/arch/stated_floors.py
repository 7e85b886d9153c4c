"""A library's own message that states the compute capability an operation needs and the lower one the device has
("cuFFT doesn't support signals of half type with compute capability less than SM_53, but the device containing input
half tensor only has SM_52"): the GPU is too old for that path. No build has it; the way out is the path's full-precision
form (fp32, the tool's half-precision switch off) or a GPU at or above the floor. The numbers come from the message, so
any library and any floor that words it this way read the same.

Facts: torch's SpectralOps (aten/src/ATen/native/cuda/SpectralOps.cpp) raises the cuFFT message; half-precision cuFFT
needs compute capability 5.3 (cuFFT documentation, "Half-precision cuFFT Transforms"). GPT-SoVITS#280's maintainer: the
GTX 970 / Tesla M40 class card (SM_52) is too old; a Tesla P100 (6.0) ran it.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule


_FLOOR = re.compile(r"(?i)(?:compute capability|SM_?)\s*(?:less than|below|lower than|<)\s*(?:SM_?)?(\d)\.?(\d)\b.{0,120}?"
                    r"(?:only has|has|is)\s*(?:compute capability\s*)?(?:SM_?)?(\d)\.?(\d)\b")
_HALF = re.compile(r"(?i)\bhalf\b|fp16|float16|bf16|bfloat16")


@rule("gpu-unsupported")
def capability_floor_stated(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _FLOOR)
    if not lines:
        return None
    m = _FLOOR.search(lines[0].line)
    need, have = f"{m.group(1)}.{m.group(2)}", f"{m.group(3)}.{m.group(4)}"
    if (int(m.group(3)), int(m.group(4))) >= (int(m.group(1)), int(m.group(2))):
        return None
    half = bool(_HALF.search(lines[0].line))
    way = ("run it in full precision: turn the tool's half-precision / fp16 option off (fp32; a --fp32 or is_half "
           "switch, or .float() on the model and inputs), which takes this operation off the half path; "
           if half else "use the operation's other form if the tool offers one; ")
    return _make("gpu-unsupported", f"this GPU (compute capability {have}) is too old for the operation (needs {need})",
                 f"the library states the operation needs compute capability {need} or newer; the GPU has {have}. "
                 "No install or build adds it: the hardware is too old for this path",
                 f"the GPU is too old for this path: {way}or run on a GPU of compute capability {need} or newer "
                 "(nvidia-smi --query-gpu=name,compute_cap --format=csv shows it)",
                 [ctx.line_fact(lines[0])], lines[:1])
