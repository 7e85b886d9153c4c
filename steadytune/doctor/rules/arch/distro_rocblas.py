"""rocBLAS without an arch's Tensile library where the distribution's own rocBLAS has it. AMD's packages build rocBLAS
only for the archs AMD supports; Tensile would not even produce the lazy library of an arch without tuned logic files
(gfx1010, RDNA1) when built with --separate-architectures until ROCm/Tensile PR 1897 ("Use fallback libraries for archs
without optimized logic"), after which distributions that build ROCm themselves ship those files. So on a distribution
that packages ROCm, the fix for a missing TensileLibrary_lazy_<gfx>.dat is its own rocblas package instead of AMD's
repository's (a Fedora derivative that took ROCm from AMD's repository: the release that moved to Fedora's packages).

A table: the arch, the distribution release whose rocblas package carries it, and the source. Sources:
Nobara-Project/nobara-images#13 (GloriousEggroll: Nobara 40 and older took ROCm from AMD's repository, Nobara 41 uses
Fedora's unmodified ROCm packages; dnf lists rocblas-6.2.1-1.fc41 with /usr/lib64/rocblas/library/
TensileLibrary_lazy_gfx1010.dat; closed as resolved in Nobara 41); ROCm/Tensile PR 1897 (merged 2024-03)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


class DistroBuild(NamedTuple):
    arch: str
    fedora: str         # the Fedora release whose rocblas carries the arch's Tensile library
    package: str        # that package, as dnf names it
    nobara: str         # the Nobara release that uses Fedora's ROCm packages


_BUILDS = (DistroBuild("gfx1010", "Fedora 41", "rocblas-6.2.1-1.fc41", "Nobara 41"),)
_MISSING = re.compile(r"(?i)TensileLibrary(?:_lazy)?_?(gfx\w+)?\.dat\b[^\n]{0,60}(?:missing|not found|no such file|"
                      r"illegal seek|cannot read|isn't there|is not there|doesn't exist)|(?:missing|no|without|cannot "
                      r"read|can't find|cannot find)\b[^\n]{0,30}TensileLibrary(?:_lazy)?_?(gfx\w+)?\.dat")
# a Fedora-family system: named, its package manager or release tag, or ROCm installed "via Driver Manager" (Nobara's
# own tool installs ROCm that way, nobara-images#13; other distributions' driver managers install no ROCm)
_FEDORA = re.compile(r"(?i)\bfedora\b|\bnobara\b|\bdnf\b|\.fc\d\d\b|\bbazzite\b|\brocm\b[^\n]{0,30}\bDriver Manager\b")
_NOBARA = re.compile(r"(?i)\bnobara\b|\brocm\b[^\n]{0,30}\bDriver Manager\b")


@rule("arch-missing")
def distro_rocblas_has_the_arch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a Tensile library said missing for an arch of the table (named in it, or the machine's), on a
    Fedora-family system."""
    text = _text(ctx)
    lines = _lines_matching(ctx, _MISSING)
    if not lines or not _FEDORA.search(text):
        return None
    named = {m.group(1) or m.group(2) for m in _MISSING.finditer(text)} - {None}
    arch, fact = ctx.arch()
    for row in _BUILDS:
        if row.arch not in named and arch != row.arch:
            continue
        nobara = _NOBARA.search(text)
        way = (f"upgrade to {row.nobara}, which takes Fedora's own ROCm packages (Nobara 40 and older installed AMD's, "
               f"without it), and install rocblas from them" if nobara else
               f"use the distribution's own rocblas ({row.fedora} and later: {row.package} ships "
               f"/usr/lib64/rocblas/library/TensileLibrary_lazy_{row.arch}.dat) instead of AMD's repository's: remove "
               "the repo.radeon.com repository and sudo dnf install rocblas")
        return _first(_make(
            "arch-missing", f"this rocBLAS has no Tensile library for {row.arch}",
            f"the rocBLAS installed comes from AMD's packages, which are not built for {row.arch} (an arch without "
            f"tuned Tensile logic); the distribution's own rocblas is, since Tensile's fallback libraries",
            way + f"; elsewhere: a rocBLAS built with -DAMDGPU_TARGETS={row.arch} against a Tensile that has the "
            "fallback libraries (ROCm/Tensile PR 1897)",
            [f for f in (fact,) if f], lines[:1]))
    return None
