"""A release of a package whose published builds are known broken in one way, named in the paste beside that very
symptom: the release before it (or after it) is the fix, not the machine. A table, one row per release and symptom,
each with where the fact comes from; a row is added when a release's own tracker or notes establish it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


@dataclass(frozen=True)
class BrokenRelease:
    package: str            # pip's name
    names: str              # how a paste names the package (pip's name, the import name)
    version: str            # the release, exactly
    symptom: re.Pattern     # what its broken builds do
    fix: str
    source: str
    family: str = "wheel-platform"   # what the broken build lacks: a file it should ship is rocm-libs-missing


BROKEN_RELEASES = (
    BrokenRelease("flash-attn", r"flash[-_]attn", "2.8.1",
                  re.compile(r"(?i)device kernel image is invalid|invalid device function|no kernel image is available"),
                  "go back to the release before it: pip install --no-build-isolation \"flash-attn==2.8.0.post2\" (or "
                  "the 2.8.0.post2 wheel for this torch, CUDA and Python from the release page), until a later release "
                  "fixes its wheels",
                  "Dao-AILab/flash-attention issue 1749 (2.8.1's prebuilt wheels fail with 'device kernel image is "
                  "invalid' on several GPUs; 2.8.0.post2 works)"),
    # Taichi's CUDA backend loads libdevice as LLVM bitcode shipped inside the wheel (taichi/lib/slim_libdevice.10.bc);
    # the 0.5.12 Windows wheel was published without it, and 0.5.14 put it back
    BrokenRelease("taichi", r"\[?taichi\]?", "0.5.12",
                  re.compile(r"(?i)(?:bitcode file|libdevice)\b.{0,160}\bnot found|slim_libdevice\S*\.bc"),
                  "pip install -U \"taichi>=0.5.14\" (0.5.14 ships the libdevice bitcode again); or run on the CPU "
                  "backend (ti.init(arch=ti.cpu)) until then",
                  "taichi-dev/taichi issue 807 (0.5.12's Windows wheel lacks slim_libdevice.10.bc; fixed in 0.5.14)",
                  "rocm-libs-missing"),
)


@rule("wheel-platform")
def known_broken_release(ctx: Context) -> Optional[Diagnosis]:
    """A release the table knows broken, named in the paste, with its symptom on an error line."""
    text = _text(ctx)
    for row in BROKEN_RELEASES:
        named = re.search(rf"(?i)(?<![\w-]){row.names}[\s:=]*(?:version[\s:=]*)?v?{re.escape(row.version)}(?![\d])", text)
        if not named:
            continue
        lines = _lines_matching(ctx, row.symptom)
        if lines:
            return _make(row.family, f"{row.package} {row.version}'s builds are broken",
                         f"{row.package} {row.version} is installed, and its published builds fail this way on "
                         f"working machines ({row.source}): the release, not the GPU or driver, is the cause",
                         row.fix, [ctx.line_fact(lines[0])], lines)
    return None
