"""A newer ROCm that crashes on a GPU an older ROCm ran, where the paste names both releases: a Radeon consumer card
outside ROCm's official support list (where regressions for it are not caught before a release), to be run on the
release that works, installed beside the system's.

Sources: ROCm's Linux system requirements (the supported Radeon list names a few workstation / flagship cards per
generation: for RDNA2 only the Radeon PRO W6800 and V620, not the RX 6000 cards of the same gfx1030); ROCm's install
docs (several releases side by side under /opt/rocm-X.Y.Z, chosen with ROCM_PATH); llama.cpp's HIP build docs
(cmake -DGGML_HIP=ON -DAMDGPU_TARGETS=..., HIPCXX from the ROCm used)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text, _vendor


_ROCM = re.compile(r"(?i)\bROCm\W{0,3}(\d\.\d+(?:\.\d+)?)\b")
_WORKS = re.compile(r"(?i)\b(?:works?|working|worked|workaround|restores?|fine|no crash|runs? (?:fine|well|ok))\b")
_CRASH_WORDS = re.compile(r"(?i)\bseg ?faults?\w*|segmentation fault|\bcrash\w*|core dumped|SIGSEGV")
# the workstation / data-center cards ROCm lists for the gfx targets that also have consumer cards
_LISTED = re.compile(r"(?i)\bW6800\b|\bV620\b|\bW7[89]00\b|\bW7800\b|\bRX 7900 XTX?\b|\bMI\d{2,3}")


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


@rule("gpu-unsupported")
def newer_rocm_crashes_on_an_older_card(ctx: Context) -> Optional[Diagnosis]:
    """A crash under ROCm X on an AMD GPU, and ROCm Y (older) said in the same paste to work on it."""
    text = _text(ctx)
    if _vendor(ctx) != "amd" or not _CRASH_WORDS.search(text):
        return None
    releases = [m.group(1) for m in _ROCM.finditer(text)]
    working = [m.group(1) for line in ctx.sheet.lines if _WORKS.search(line) for m in _ROCM.finditer(line)]
    if not releases or not working:
        return None
    old = min(working, key=_release)
    newer = [r for r in releases if _release(r)[:2] > _release(old)[:2]]
    sides = re.findall(r"(?i)\b(\d\.\d+\.\d+)\b(?=[^\n]{0,40}\b(?:broken|crash|segfault|fails?))", text)
    new = max(newer + sides, key=_release) if newer or sides else None
    if new is None or _release(new)[:2] <= _release(old)[:2]:
        return None
    arch, fact = ctx.arch()
    if arch is None or not arch.startswith("gfx"):
        return None
    crashed = _lines_matching(ctx, _CRASH_WORDS)
    card = next((f.value for f in ctx.sheet.of("gpu")), arch)
    listed = _LISTED.search(card)
    tool = ctx.tool() or "the program"
    root = f"/opt/rocm-{old}"
    build = (f"cmake -B build -DGGML_HIP=ON -DAMDGPU_TARGETS={arch} with ROCM_PATH={root} HIPCXX={root}/llvm/bin/clang++"
             if tool in ("llama.cpp", "ollama", "koboldcpp", "whisper.cpp", "llama-cpp-python") else
             f"ROCM_PATH={root} for its build")
    return _make("gpu-unsupported", f"ROCm {new} crashes on the {card}, which ROCm {old} runs",
                 f"ROCm {new} crashes with {arch} where ROCm {old} works; "
                 + ("" if listed else f"the {card} is not on ROCm's official support list (for its generation only "
                    "a few workstation cards are), so a newer release can break it unnoticed, ")
                 + f"and the fix is to stay on the release that runs it",
                 f"install ROCm {old} beside the system's ROCm {new} (AMD's packages or tarball under {root}) and "
                 f"build and run {tool} against it: {build}, and LD_LIBRARY_PATH={root}/lib when it runs; keep "
                 f"ROCm {old} for this GPU until a later release is shown to run it (report the crash to ROCm with "
                 f"the {arch} target)", [fact] if fact else [], crashed[:2], confirmed=False)
