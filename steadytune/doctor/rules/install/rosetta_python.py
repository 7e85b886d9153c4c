"""An Intel (x86_64) Python on an Apple silicon Mac: it runs under Rosetta, so pip looks for macOS x86_64 wheels and
platform checks see an Intel CPU. Packages that publish arm64-only macOS wheels (MLX, mlx-lm, mflux) then have "no
matching distribution ... (from versions: none)", and tools that check the CPU before using Metal (Lightning's
MPSAccelerator) say MPS is not available, although the Mac has both.

Decided by: an Apple silicon Mac named (M1 ... M4, "Apple silicon") beside either the Python's own report of an Intel
CPU (platform.processor() "i386", platform.machine() "x86_64") or pip finding no MLX release at all (MLX's macOS wheels
are arm64 only, for every Python it supports: its PyPI files, ml-explore/mlx's install docs "a native Python ... >= 3.9
... if this prints x86 then you're running under Rosetta"). Sources: mflux-community/mflux#23 (platform.processor()
said i386; a native arm64 Miniconda fixed it), Lightning-AI/pytorch-lightning#14634 (an M1 Pro reporting i386: an
Intel conda under Rosetta; a native arm64 conda fixed it)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_APPLE_SILICON = re.compile(r"(?i)\bapple silicon\b|\b(?:mac\w*|apple|macOS)\b.{0,60}\bM[1-5](?:\s?(?:Pro|Max|Ultra))?\b|"
                            r"\bM[1-5](?:\s?(?:Pro|Max|Ultra))?\b.{0,40}\b(?:mac\w*|apple|chip)\b")
# the interpreter's own report of an Intel CPU
_INTEL_REPORT = re.compile(r"(?i)\bi386\b|platform\.(?:machine|processor)\(\).{0,40}x86_64|\bx86_64\b.{0,40}"
                           r"(?:python|conda|rosetta)|\brosetta\b")
# pip finding no release at all of a package whose macOS wheels are arm64 only
_ARM64_ONLY = re.compile(r"(?i)(?:No matching distribution found for|satisfies the requirement)\s+(mlx[\w.-]*|mflux)")
# a tool that checks the CPU before using Metal, saying MPS is not there
_NO_MPS = re.compile(r"(?i)MPS\w*\b.{0,60}\bnot available|mps.{0,20}is_available\(\).{0,20}False")


@rule("wheel-platform")
def intel_python_on_apple_silicon(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    # "M1 Pro" alone, or a bare "M2" where the paste is about Metal / MLX, names the chip too
    if not (_APPLE_SILICON.search(text) or re.search(r"\bM[1-5]\s?(?:Pro|Max|Ultra)\b", text) or
            (re.search(r"\bM[1-5]\b", text) and re.search(r"(?i)\bMPS|\bmlx|\bMetal\b", text))):
        return None
    intel = _lines_matching(ctx, _INTEL_REPORT)
    arm_only = _lines_matching(ctx, _ARM64_ONLY)
    no_mps = _lines_matching(ctx, _NO_MPS)
    if not no_mps and re.search(r"(?is)mps\.is_available\(\)\W{0,20}\bFalse\b", text):
        no_mps = _lines_matching(ctx, re.compile(r"mps\.is_available\(\)"))
    if not (arm_only or (intel and no_mps) or (intel and re.search(r"(?i)\bpip\b|wheel|No matching distribution", text))):
        return None
    lines = (arm_only or no_mps) + intel
    package = _ARM64_ONLY.search(arm_only[0].line).group(1) if arm_only else None
    said = ("pip finds no " + package + " release at all: its macOS wheels are built for arm64 only" if package else
            "Metal (MPS) and arm64-only wheels are out of its reach")
    return _first(_make(
        "wheel-platform", "an Intel (x86_64) Python under Rosetta on an Apple silicon Mac",
        f"the Python in use is a non-native x86_64 build (an Intel Homebrew in /usr/local, an Intel conda or "
        f"python.org's Intel installer) running emulated under Rosetta, so it reports the CPU as i386 / x86_64; {said}",
        "check it: python3 -c \"import platform; print(platform.machine(), platform.processor())\" - i386 or x86_64 "
        "means a non-native Python under Rosetta (arm64 / arm is native). Install a native arm64 Python (Miniforge or "
        "Miniconda's arm64 installer, Homebrew in /opt/homebrew, python.org's universal2 installer; not from a "
        "terminal set to Open using Rosetta), make a fresh environment with it and reinstall there"
        + (f" (pip install {package})" if package else ""), [ctx.line_fact(l) for l in lines[:2]], lines))
