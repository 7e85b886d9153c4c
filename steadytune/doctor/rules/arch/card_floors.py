"""An NVIDIA card a program's release calls too old although it is within the floor the program documents: that
release's build left its arch out (a card under the floor, or an old card beside a supported one, is tool_floors')."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.tool_floors import RAISED, tool_release
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

# the oldest compute capability each program documents for its CUDA builds (ollama docs/gpu.md: "compute capability
# 5.0+")
_DOCUMENTED_FLOOR = {"ollama": (5, 0)}
_TOO_OLD = re.compile(r"(?i)CUDA GPU is too old\b")
_DETECTED = re.compile(r"(?i)Compute Capability detected:?\s*(\d+)\.(\d)")


@rule("arch-missing")
def release_below_its_documented_floor(ctx: Context) -> Optional[Diagnosis]:
    """The program says the GPU is too old, and the compute capability it detected is at or above the floor the
    program documents: this release's CUDA libraries were built without that arch (the documented floor says the
    program supports it), so a release built with it, or a source build for it, runs on the GPU."""
    tool = ctx.tool()
    floor = _DOCUMENTED_FLOOR.get(tool or "")
    text = _text(ctx)
    if floor is None or not _TOO_OLD.search(text):
        return None
    version = tool_release(text, "Ollama") if tool == "ollama" else None
    if version and any(name.lower() == tool and first <= version <= last for name, first, last, *_ in RAISED):
        return None   # a release known to have raised its floor: tool_floors names the release after it
    lines = _lines_matching(ctx, _DETECTED.pattern)
    if not lines:
        return None
    found = _DETECTED.search(lines[-1].line)
    cc = (int(found.group(1)), int(found.group(2)))
    if cc < floor or cc < (2, 0):
        return None   # below the floor: the unsupported reading (1.x is no real GPU: a wrong CUDA runtime)
    return _first(_make("arch-missing", f"this {tool} release was built without compute capability {cc[0]}.{cc[1]}",
                        f"{tool} documents compute capability {floor[0]}.{floor[1]} and newer as supported, yet this "
                        f"release calls the GPU (compute capability {cc[0]}.{cc[1]}) too old: its CUDA libraries were "
                        f"built without that arch and it falls back to the CPU",
                        f"update {tool} to a current release (its CUDA builds include compute capability "
                        f"{floor[0]}.{floor[1]} and newer, {cc[0]}.{cc[1]} among them), or build it from source for "
                        f"this GPU (CMAKE_CUDA_ARCHITECTURES={cc[0]}{cc[1]}); an older release that ran on the GPU "
                        "works until then", [ctx.line_fact(lines[-1])], lines[-1:]))
