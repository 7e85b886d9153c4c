"""nvcc's host_config.h refusing the Visual Studio it found, with the range it accepts in its own words: "unsupported
Microsoft Visual Studio version! Only the versions between 2017 and 2022 (inclusive) are supported!". When the Visual
Studio named is the range's newest (2022) the refusal is of an update newer than this CUDA knows (VS 2022 17.10's MSVC
19.40 under CUDA 12.3 and older), and when it is newer than the range (VS 2026) the whole release is; either way the
release that works is the newest one the range holds that is not the refused one: Visual Studio 2019 (Build Tools)
beside a 2022 update, Visual Studio 2022 beside a 2026. An older MSVC toolset of the same Visual Studio, or a newer
CUDA toolkit, are the other ways; -allow-unsupported-compiler skips the check at one's own risk.

Decided by: the message's range, and the Visual Studio release the paste names (else its range's newest). Sources:
graphdeco-inria/gaussian-splatting#833 (VS 2022 17.10 with CUDA 12.3: installing Visual Studio 2019 and rebuilding
fixed it); the catalogue's nvcc-visual-studio-unsupported entry (NVIDIA's Windows install guide lists the Visual Studio
releases each CUDA supports)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_RANGE = re.compile(r"(?i)unsupported Microsoft Visual Studio version!.{0,40}between (20\d\d) and (20\d\d)")
_RELEASES = (2017, 2019, 2022, 2026)      # Visual Studio's releases, by their year
_NAMED = re.compile(r"(?i)Visual Studio\s*(20\d\d)|\bVS\s*(20\d\d)\b")


@rule("abi-mismatch")
def visual_studio_outside_nvcc_range(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _RANGE)
    if not lines:
        return None
    low, high = (int(y) for y in _RANGE.search(lines[0].line).groups())
    named = [int(a or b) for a, b in _NAMED.findall(_text(ctx))]
    used = max(named) if named else high
    if used > high:
        pick = max(r for r in _RELEASES if low <= r <= high)
        why = f"Visual Studio {used} is newer than every release this CUDA accepts ({low} to {high})"
    elif used < high:
        return None     # a release inside the range refused: not this reading (a wrong prompt, another toolset)
    else:
        inside = [r for r in _RELEASES if low <= r < used]
        if not inside:
            return None
        pick = inside[-1]
        why = (f"this Visual Studio {used} is an update newer than the CUDA toolkit knows (its MSVC version is past the "
               f"check), though {used} is in the range by name")
    return _first(_make(
        "abi-mismatch", f"nvcc refuses this Visual Studio {used}",
        f"nvcc accepts only the host compilers of the Visual Studio releases it was tested with; {why}",
        f"install Visual Studio {pick} (its Build Tools with the \"Desktop development with C++\" workload are enough) "
        f"and build from its x64 Native Tools prompt, removing the build folders first; or add an older MSVC toolset of "
        f"Visual Studio {used} in the Visual Studio Installer (Individual components) and open its prompt "
        f"(vcvars64.bat -vcvars_ver=<that toolset>); or install a newer CUDA toolkit that supports this Visual Studio; "
        f"-allow-unsupported-compiler (NVCC_APPEND_FLAGS=-allow-unsupported-compiler for pip builds) skips the check at "
        f"your own risk", [ctx.line_fact(lines[0])], lines[:1]))
