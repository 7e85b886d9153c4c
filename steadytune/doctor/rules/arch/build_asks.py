"""A short ask for a build that runs on an AMD GPU ("Possible build for gfx1201?", "RX 9070 XT support", "add the
9070xt"), naming no tool whose own remedy doctor knows: whether a program runs on a Radeon or Instinct card is whether
its binaries were compiled for the card's gfx target, so the answer is a build whose targets include it (the
program's release built for it, its source build with the target, and for PyTorch AMD's TheRock index of the card's
family)."""

from __future__ import annotations

from typing import Optional

from steadytune.doctor.fixes import therock_family
from steadytune.doctor.rules.base import Context, Diagnosis, _make, rule
from steadytune.doctor.rules.arch.gpu_asks import asks_about_gpu


def _is_thin(ctx: Context) -> bool:
    """A title and a sentence or two, with no error line of a known class: its words are all the evidence."""
    return all(e.family is None for e in ctx.errors) and sum(1 for line in ctx.sheet.lines if line.strip()) <= 15


@rule("arch-missing")
def build_asked_for_an_amd_gpu(ctx: Context) -> Optional[Diagnosis]:
    if not _is_thin(ctx):
        return None
    tool = ctx.tool()
    if tool not in (None, "torch"):
        return None   # a named tool's own remedy is arch_missing.py's support request
    arch, where = ctx.arch([])
    if not arch or not arch.startswith("gfx") or where is None:
        return None
    asked = asks_about_gpu(ctx, arch)
    if not asked:
        return None
    family = therock_family(arch)
    torch = (f"; for PyTorch, AMD's TheRock builds for the {family} family carry it: pip install torch --index-url "
             f"https://rocm.nightlies.amd.com/v2/{family}/" if family else "")
    return _make("arch-missing", f"a build that carries {arch}",
                 f"a program runs on an AMD GPU only where its binaries were compiled for the GPU's gfx target "
                 f"({arch}); the paste asks for one", f"use a build whose GPU targets include {arch}: the program's "
                 f"release that lists {arch}, or build it from source with {arch} among its targets (AMDGPU_TARGETS / "
                 f"GPU_TARGETS={arch}){torch}", [where], asked, confirmed=False)
