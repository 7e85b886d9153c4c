"""LM Studio's GPU backends on AMD cards between its 0.2.25 and 0.3 releases: 0.2.25 stopped shipping the OpenCL
backend (llama.cpp had deprecated it) in the default download, so an AMD card without the ROCm extension pack had
no GPU backend, and the GPU Offload setting went inactive; the OpenCL (or ROCm) extension pack brought it back.

Source: lmstudio-ai/lmstudio-bug-tracker issue 40 (RX 6600 XT: offload selectable in 0.2.24, inactive in 0.2.25;
fixed by the OpenCL extension pack per lmstudio-ai/configs' Extension-Pack-Instructions). The ROCm pack covered the
cards of the HIP SDK's list (gfx1030, gfx1100, gfx1101, gfx1102).

The same list answers the ROCm runtime's failed hardware survey on a card off it (an RDNA4 card before the runtime
carried gfx1201): a runtime release that lists the target, Vulkan until then."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text, _vendor


# LM Studio named, or its setting named beside one of its 0.2.x release numbers
_LMSTUDIO = re.compile(r"(?i)\bLM ?Studio\b|\blmstudio\b")
_RELEASE = re.compile(r"\b0\.2\.(2[5-9]|3\d)\b")
_OFFLOAD_GONE = re.compile(r"(?i)\bGPU ?offload\b.{0,40}\b(?:inactive|gr[ae]yed|disabled|unavailable|not available|"
                           r"missing|gone|can.?t (?:be )?select\w*|cannot (?:be )?select\w*)|"
                           r"(?:can.?t|cannot|unable to) (?:select|enable|use|turn on) (?:the )?GPU ?offload")
_ROCM_PACK = ("gfx1030", "gfx1100", "gfx1101", "gfx1102")


@rule("rocm-libs-missing")
def lmstudio_without_opencl(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    release = _RELEASE.search(text)
    said = _lines_matching(ctx, _OFFLOAD_GONE)
    amd = _vendor(ctx) == "amd" or re.search(r"(?i)\bRadeon\b|\bRX ?\d{4}\b|\bAMD\b", text)
    if not (said and release and amd) or not (_LMSTUDIO.search(text) or re.search(r"(?i)\bGPU Offload\b", text)):
        return None
    archs = ctx.sheet.machine_archs
    rocm = next((a for a in archs if a in _ROCM_PACK), None)
    pack = (f"the ROCm extension pack (it covers {rocm}) or the OpenCL one" if rocm else
            "the OpenCL extension pack (the ROCm pack covers only gfx1030 and the RX 7000 cards)")
    return _make("rocm-libs-missing", f"LM Studio 0.2.{release.group(1)} ships no GPU backend for this AMD card",
                 "from 0.2.25 LM Studio's default download no longer carries the OpenCL backend (deprecated in its "
                 "llama.cpp), which was the one an AMD card used; without an extension pack there is no GPU backend, "
                 "so GPU Offload cannot be selected",
                 f"install {pack} following lmstudio-ai/configs' Extension-Pack-Instructions, then restart LM Studio "
                 "and set GPU Offload again; or a later LM Studio whose runtime list offers a GPU runtime for the card "
                 "(Vulkan), or stay on 0.2.24", [], said[:1], confirmed=False)


# LM Studio's ROCm llama.cpp runtime refusing the card at its hardware survey, in its words ("Error surveying hardware",
# "GPU survey unsuccessful", "No compatible ROCm GPUs found on device")
_SURVEY_FAILED = re.compile(r"(?i)\bError surveying hardware\b|\bGPU survey (?:was )?unsuccessful\b|"
                            r"No compatible ROCm GPUs found")
# The gfx targets LM Studio's ROCm runtime has carried from its first packs (the HIP SDK's list, above), and for a newer
# target the runtime release a user found it in: gfx1201 (RX 9070 / R9700) ran on the Linux ROCm runtime 2.27.1
# (lmstudio-ai/lmstudio-bug-tracker#1306); the runtime's manifest lists its targets under gpu.targets
_ROCM_RUNTIME_ADDED = {"gfx1201": "2.27.1"}


@rule("arch-missing")
def lmstudio_rocm_runtime_without_the_target(ctx: Context) -> Optional[Diagnosis]:
    """LM Studio's ROCm runtime failing its hardware survey on an AMD card whose gfx target is not one it has carried
    from the start: the runtime is prebuilt for a list of targets (its manifest's gpu.targets), and a card off the
    list is not surveyed, while the Vulkan runtime runs it. The fix is a runtime release that lists the target."""
    text = _text(ctx)
    said = _lines_matching(ctx, _SURVEY_FAILED)
    if not said or not _LMSTUDIO.search(text) or not re.search(r"(?i)\bROCm\b", text):
        return None
    arch = next((a for a in ctx.sheet.machine_archs if a.startswith("gfx")), None)
    if arch is None or arch in _ROCM_PACK:
        return None   # a card of the runtime's first list: its survey failing is another cause (driver, memory query)
    gpu = next((g.value for g in ctx.sheet.of("gpu") if g.detail == arch), None)
    on = f"the {gpu} ({arch})" if gpu else arch
    added = _ROCM_RUNTIME_ADDED.get(arch)
    which = (f"ROCm llama.cpp runtime {added} or newer, which runs {arch}" if added else
             f"a ROCm llama.cpp runtime whose manifest lists {arch} under gpu.targets")
    return _make("arch-missing", f"LM Studio's ROCm runtime is not built for {arch}",
                 f"LM Studio's ROCm llama.cpp runtime is prebuilt for a list of gfx targets, and the installed one "
                 f"does not carry {on}, so its hardware survey finds no GPU it can run (the Vulkan runtime, built for "
                 f"any card, works)",
                 f"update the runtime in LM Studio (Mission Control / Developer > Runtime, check for updates) to the "
                 f"{which}; until then select the Vulkan llama.cpp runtime", [], said[:1], confirmed=bool(added))
