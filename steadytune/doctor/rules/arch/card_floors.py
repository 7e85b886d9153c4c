"""An NVIDIA card against a program's compute capability floor, where the paste shows more than "too old": a card the
release calls too old although it is within the floor the program documents (that release's build left its arch out),
and an unsupported card beside a supported one (the old card keeps the program off every GPU)."""

from __future__ import annotations

import re
from typing import Optional

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


# Kepler cards by model (NVIDIA's CUDA GPUs table): current CUDA builds start at compute capability 5.0
_KEPLER = re.compile(r"(?i)\b(?:tesla\s*)?(K80|K40m?|K20[xm]?|K10)\b")
_KEPLER_CC = {"K80": "3.7", "K40": "3.5", "K20": "3.5", "K10": "3.0"}
_NOT_USED = re.compile(r"(?i)\b(?:not|never|won'?t|will not|doesn'?t|does not) (?:run(?:ning)? on|use|using|see)\b"
                       r"[^\n]{0,20}\bgpus?\b|\bnot running on (?:the )?gpu|\bonly (?:uses|runs on) (?:the )?cpu\b")


@rule("gpu-unsupported")
def old_card_beside_a_supported_one(ctx: Context) -> Optional[Diagnosis]:
    """A Kepler card (below compute capability 5.0, the floor of current CUDA builds) beside a newer NVIDIA card, and
    no GPU used: programs that check every visible GPU give up on all of them for the old one; hiding the old card
    leaves the supported one to run."""
    text = _text(ctx)
    kepler = _KEPLER.search(text)
    newer = [a for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_\d+", a) and int(a[3:]) >= 50]
    lines = _lines_matching(ctx, _NOT_USED.pattern)
    if kepler is None or not newer or not lines or any(e.family for e in ctx.errors):
        return None
    old = kepler.group(1).upper()[:3]
    cc = _KEPLER_CC.get(old, "3.x")
    return _make("gpu-unsupported", f"the {old} is below the builds' compute capability",
                 f"the {old} has compute capability {cc}, below the 5.0 that current CUDA builds start at; with it "
                 "visible, a program that checks every GPU (Ollama's releases of early 2024 among them) turns GPU use "
                 f"off altogether, and the supported card ({newer[0]}) goes unused too",
                 f"hide the {old} from the program: CUDA_VISIBLE_DEVICES=<the index of the supported card in "
                 "nvidia-smi -L> (set in the service's environment for a daemon such as ollama: systemctl edit "
                 f"ollama), or take the {old} out; the {old} itself needs an old release built for compute capability "
                 f"{cc}", [], lines[:1])
