"""A program's bundled ROCm runtime (its own copies of libhsa-runtime64 / libamdhip64) failing where the system's
ROCm works, said in the paste: the bundle's copies are the fault, so the loader should take the system's first."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_BUNDLED = r"(?i)\bbundled\b.{0,60}\b(?:rocm|hip|hsa|runtime|libhsa-runtime64|libamdhip64)\b|" \
           r"\b(?:rocm|hip|hsa)\b.{0,20}\bruntime\b.{0,20}\bbundled\b"
_SYSTEM_WORKS = re.compile(r"(?i)\bworks?\b.{0,20}\b(?:with|on|using)\s+(?:the\s+)?system(?:'s)?\s+rocm\b|"
                           r"\bsystem\s+rocm\b.{0,40}\bworks?\b|/opt/rocm\b.{0,40}\bworks?\b")


@rule("wheel-platform")
def bundled_runtime_fails_where_system_works(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _BUNDLED)[:1]
    if not said or not _SYSTEM_WORKS.search(_text(ctx)):
        return None
    system = next((m.group(0) for line in ctx.sheet.lines
                   for m in [re.search(r"/opt/rocm(?:-\d+\.\d+(?:\.\d+)?)?\b", line)] if m), "/opt/rocm")
    return _make("wheel-platform", "the program's bundled ROCm runtime fails where the system's works",
                 "the program loads its own copies of the ROCm runtime (libhsa-runtime64, libamdhip64) before the "
                 f"system's; the paste says the system ROCm ({system}) runs the same GPU, so the bundled copies are "
                 "what fails", f"make the loader take the system ROCm first: LD_LIBRARY_PATH={system}/lib:"
                 "$LD_LIBRARY_PATH when starting the program (or remove the bundled libhsa-runtime64 / libamdhip64 "
                 "copies so the system's load), and use a release of the program that prefers the system runtime",
                 [ctx.line_fact(said[0])], said + [e for e in ctx.errors if e.family is None][:2])
