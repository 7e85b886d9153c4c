"""LM Studio's GPU backends on AMD cards between its 0.2.25 and 0.3 releases: 0.2.25 stopped shipping the OpenCL
backend (llama.cpp had deprecated it) in the default download, so an AMD card without the ROCm extension pack had
no GPU backend, and the GPU Offload setting went inactive; the OpenCL (or ROCm) extension pack brought it back.

Source: lmstudio-ai/lmstudio-bug-tracker issue 40 (RX 6600 XT: offload selectable in 0.2.24, inactive in 0.2.25;
fixed by the OpenCL extension pack per lmstudio-ai/configs' Extension-Pack-Instructions). The ROCm pack covered the
cards of the HIP SDK's list (gfx1030, gfx1100, gfx1101, gfx1102)."""

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
