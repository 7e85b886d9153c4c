"""torch's own warning that a GPU is outside the compute capabilities its build supports ("Found GPU0 NVIDIA GB10 which
is of cuda capability 12.1. Minimum and Maximum cuda capability supported by this version of PyTorch is (8.0) -
(12.0)"). Read by the numbers it prints: a GPU of the same major as the build's newest target and a newer minor runs
that target's kernels (CUDA: code for X.y runs on X.z, z >= y), so the warning is a false alarm that a later torch
no longer prints; a newer major or an older card than the range is code the build really lacks."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import cuda_wheel_for
from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, rule

_FOUND = re.compile(r"(?i)Found GPU\s?\d+ (.{1,60}?) which is of cuda capability (\d{1,2})\.(\d)")
_RANGE = re.compile(r"(?i)Minimum and Maximum cuda capability supported by this version of PyTorch is\s*"
                    r"\((\d{1,2})\.(\d)\)\s*-\s*\((\d{1,2})\.(\d)\)")
# the release whose check accepts a newer minor of the build's newest major (pytorch PR #166185)
_RELAXED_IN = "2.11"


@rule("arch-missing")
def outside_torchs_capability_range(ctx: Context) -> Optional[Diagnosis]:
    text = "\n".join(ctx.sheet.lines)
    found, bounds = _FOUND.search(text), _RANGE.search(text)
    if not found or not bounds:
        return None
    gpu, cc = found.group(1).strip(), (int(found.group(2)), int(found.group(3)))
    low, high = (int(bounds.group(1)), int(bounds.group(2))), (int(bounds.group(3)), int(bounds.group(4)))
    said = _lines_matching(ctx, r"(?i)Found GPU\s?\d+ .{1,60}? which is of cuda capability")[:1]
    arch = f"sm_{cc[0]}{cc[1]}"
    if cc[0] == high[0] and cc[1] > high[1]:
        diagnosis = _make("arch-missing", f"the {gpu} ({cc[0]}.{cc[1]}) is a newer minor of the build's "
                          f"{high[0]}.{high[1]}",
                          f"the build's newest target is sm_{high[0]}{high[1]}; CUDA runs code built for "
                          f"{high[0]}.{high[1]} on any {high[0]}.x GPU at or above it, so the {gpu} runs those kernels and "
                          "only the check is too strict",
                          f"the warning is a false alarm for the {gpu}: its sm_{high[0]}{high[1]} kernels run on {arch} "
                          f"(same major); keep this torch, or upgrade to torch {_RELAXED_IN} or newer, whose check "
                          "accepts a newer minor of the same major (pytorch PR #166185)", [], said, confirmed=False)
    elif cc > high or cc < low:
        diagnosis = _make("arch-missing", f"this torch has no code for the {gpu} ({cc[0]}.{cc[1]})",
                          f"the build's kernels cover compute capability {low[0]}.{low[1]} to {high[0]}.{high[1]}; the "
                          f"{gpu} is {cc[0]}.{cc[1]}", cuda_wheel_for(arch) or "a torch built for this GPU", [], said)
    else:
        return None
    # torch's own numbers settle it before a question about support (torch_cuda.py) is read
    return _ahead_of(diagnosis, "torch-build")
