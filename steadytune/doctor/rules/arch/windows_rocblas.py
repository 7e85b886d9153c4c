"""Which rocBLAS carries the GPU on Windows. There HSA_OVERRIDE_GFX_VERSION does not reach the HIP SDK's libraries:
a program (Ollama's ROCm runner, ZLUDA, a HIP build of llama.cpp) runs on a Radeon only where the rocblas.dll and
rocblas\\library it loads were built for the card's gfx target. Two readings:

  an arch AMD's own HIP SDK carries, asked of the community ROCmLibs packages (which are made only for the archs the
  SDK leaves out): none is needed, the SDK's libraries carry it, as shipped in Ollama's ROCm package
  an old arch the HIP SDK 6 libraries no longer build (Vega's gfx900, gfx902, Polaris' gfx803) under Ollama on
  Windows: only libraries built against HIP SDK 5.7 carry it (ollama-for-amd's ROCm 5 list), the override does nothing
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (
    _NO_GPU_USE, NOT_DETECTED, OVERRIDE, Context, Diagnosis, _lines_matching, _make, rule, _text,
)
from steadytune.hardware.gpu_facts import normalise_gfx

# The archs whose rocBLAS AMD's Windows HIP SDK ships, by the first SDK that lists them in its "HIP SDK" column:
# gfx1030 and gfx1100-gfx1102 from HIP SDK 5.7 (https://rocm.docs.amd.com/en/docs-5.7.1/release/windows_support.html),
# RDNA4's gfx1200 (RX 9060 XT) and gfx1201 (RX 9070 XT, AI PRO R9700) from HIP SDK 6.4.2
# (https://rocm.docs.amd.com/projects/install-on-windows/en/docs-6.4.2/reference/system-requirements.html; the 6.2.4
# table has no RDNA4 card). Cards with the runtime only (gfx1031, gfx1032...) are the ones ROCmLibs packages exist for.
_SDK_ARCHS = {"gfx1030": "5.7", "gfx1100": "5.7", "gfx1101": "5.7", "gfx1102": "5.7", "gfx1200": "6.4.2",
              "gfx1201": "6.4.2"}

# Archs whose Windows rocBLAS the community builds only against HIP SDK 5.7: ollama-for-amd's README lists gfx803,
# gfx900:xnack- and gfx902 as its "(ROCm5)" additions (gfx803 "disabled in HIP SDK 6.1.2"), its ROCm 6 list starts at
# gfx906 (https://github.com/likelovewant/ollama-for-amd README); a Vega 56 ran once the rocblas.dll in lib\ollama was
# the one from its rocm5.7 package (likelovewant/ollama-for-amd#35)
_ROCM5_ONLY = ("gfx803", "gfx900", "gfx902")

# the community rocBLAS replacements (ROCmLibs packages, brknsoul/ROCmLibs, likelovewant/ROCmLibs-for-gfx1103-...),
# or a rocBLAS asked for by arch ("rocblas.dll for gfx1201", "rocblas library built for gfx1200")
_REPLACEMENT = re.compile(r"(?i)\bROCm ?Libs\b|\brocblas(?:\.dll)?\b[^\n]{0,30}\b(?:for|built for)\s+gfx\d{3,4}")
# Windows said by the things only Windows has: its paths, .exe/.dll, the HIP SDK, the community Windows packages
_WINDOWS_THINGS = re.compile(r"(?i)\b[A-Z]:\\|\.exe\b|\.dll\b|\bHIP SDK\b|%HIP_PATH%|\bROCm ?Libs\b|ollama-for-amd|"
                             r"\bwin(?:dows)?\s*1[01]\b|\bwindows\b")
_GFX = re.compile(r"(?i)(?<![\w.])gfx(\d{3,4}[a-z]?)\b")


def _windows(ctx: Context) -> bool:
    return ctx.sheet.is_windows or bool(_WINDOWS_THINGS.search(_text(ctx)))


def _ollama(ctx: Context) -> bool:
    return ctx.tool() == "ollama" or bool(re.search(r"(?i)\bollama\b", _text(ctx)))


def _archs_named(ctx: Context) -> list[str]:
    """The gfx targets the paste names, the machine's first: its arch facts, then any gfx word (a library's name,
    a release note's list)."""
    arch, _where = ctx.arch([])
    named = [arch] if arch else []
    for m in _GFX.finditer(_text(ctx)):
        gfx = normalise_gfx("gfx" + m.group(1).lower())
        if gfx not in named:
            named.append(gfx)
    return named


@rule("arch-missing")
def replacement_asked_for_an_sdk_arch(ctx: Context) -> Optional[Diagnosis]:
    """A community rocBLAS package asked for (or missed) for a GPU that AMD's HIP SDK itself carries: there is none
    to have, the SDK's own libraries are the ones for it."""
    asked = _lines_matching(ctx, _REPLACEMENT.pattern)
    if not asked or not _windows(ctx):
        return None
    archs = [a for a in _archs_named(ctx) if a in _SDK_ARCHS]
    if not archs:
        return None
    names = " and ".join(archs)
    need, it = ("need", "them") if len(archs) > 1 else ("needs", "it")
    sdk = max((_SDK_ARCHS[a] for a in archs), key=lambda v: tuple(int(x) for x in v.split(".")))
    if _ollama(ctx):
        fix = (f"{names} {need} no ROCmLibs package: AMD's HIP SDK ({sdk} and later) builds rocBLAS for {it}, and "
               "Ollama ships those libraries in its ROCm package: install the release (OllamaSetup.exe, or "
               "ollama-for-amd's setup), then extract the release's ollama-windows-amd64-rocm package "
               "(ollama-windows-amd64-rocm.zip from Ollama, ollama-windows-amd64-rocm.7z from ollama-for-amd) into the "
               "same folder, over the install, and restart Ollama; take out any rocblas.dll or rocblas\\library copied "
               f"in from a ROCmLibs package; leave {OVERRIDE} unset")
    else:
        fix = (f"{names} {need} no ROCmLibs package: install AMD's HIP SDK {sdk} or later, whose own rocblas.dll and "
               f"rocblas\\library carry {names} (in %HIP_PATH%bin), and put back the SDK's files where a ROCmLibs "
               "package replaced them")
    title = f"{names}: the HIP SDK's own rocBLAS carries {it}, no ROCmLibs package is made for {it}"
    cause = (f"community ROCmLibs packages exist only for GPUs AMD's Windows HIP SDK leaves out; {names} "
             f"{'are' if len(archs) > 1 else 'is'} in the SDK's own list (from HIP SDK {sdk}), so its libraries come "
             "with the SDK and the programs that ship them")
    evidence = [f for f in ctx.sheet.of("arch") + ctx.sheet.of("built_for") if f.value in archs][:1]
    diagnosis = _make("arch-missing", title, cause, fix, evidence, asked[:1], confirmed=False)
    # before arch_missing.py's support request and Windows reading (update, rebuild, a rocBLAS for the arch): the
    # package asked for names which libraries are at issue, and for an arch the SDK carries the answer is the SDK's
    diagnosis.rank -= 1
    return diagnosis


@rule("arch-missing")
def ollama_windows_on_a_rocm5_arch(ctx: Context) -> Optional[Diagnosis]:
    """Ollama on Windows not using (or not finding) a GPU whose arch only HIP SDK 5.7 libraries still carry: the
    runner's rocBLAS is built against a HIP SDK 6 release without it, and the override cannot stand in for it there."""
    if not ctx.sheet.is_windows and not re.search(r"(?i)\.exe\b|\b[A-Z]:\\|ollama-for-amd", _text(ctx)):
        return None
    if ctx.tool() != "ollama":
        return None
    arch, where = ctx.arch(ctx.errors)
    if arch not in _ROCM5_ONLY:
        return None
    trouble = ctx.no_gpu() or _lines_matching(ctx, _NO_GPU_USE.pattern) or _lines_matching(ctx, NOT_DETECTED) or \
        ctx.of("arch-missing") or [f for f in ctx.sheet.of("complaint") if f.value == "yes"]
    if not trouble:
        return None
    override = f"; {OVERRIDE} does nothing on Windows: remove it" if ctx.override() is not None else ""
    cause = ("Ollama's ROCm runner on Windows loads the rocblas.dll and rocblas\\library in its lib\\ollama folder, "
             f"built against a HIP SDK 6 release, which no longer builds {arch}; on Windows {OVERRIDE} does not reach "
             "those libraries")
    fix = (f"use libraries built for {arch} against HIP SDK 5.7: ollama-for-amd's ROCm 5 build (its README lists "
           "gfx803, gfx900:xnack- and gfx902 under ROCm5), or replace the rocblas.dll and rocblas\\library in "
           f"Ollama's lib\\ollama with ones built for {arch} against HIP SDK 5.7 (ollama-for-amd's rocm5.7 package, "
           f"or a ROCmLibs package for {arch} and HIP SDK 5.7), then restart Ollama{override}")
    diagnosis = _make("arch-missing", f"Ollama's Windows ROCm libraries have no {arch}", cause, fix,
                      [where] if where else [], trouble[:1], confirmed=False)
    # before arch_missing.py's Windows reading (a rocBLAS for "the HIP SDK"): which SDK release still builds the arch
    # is the point, since the one Ollama ships does not
    diagnosis.rank -= 1
    return diagnosis
