"""Ollama on Windows rejecting every AMD GPU, an integrated one among them, with an empty supported list ("amdgpu is
not supported (supported types:[])") after the user tried HSA_OVERRIDE_GFX_VERSION: its Windows ROCm runner has no
library for the iGPU, and the override does not apply to the HIP SDK's libraries on Windows, so no override, driver or visibility setting brings one in. Ollama's
Vulkan backend runs on any Radeon (experimental in source builds from 0.12.6, in the binary releases after it behind
OLLAMA_VULKAN=1, enabled by later releases). Corrected in round 18: ollama/ollama's v0.12.6 release notes say Vulkan "is
now available when you build locally from source ... In a future release, Vulkan support will be included in the
binary release as well", so 0.12.6's installer has none; the first binary release with it was not pinned down."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import family
from steadytune.doctor.rules.base import _APU_ARCHS, Context, Diagnosis, _lines_matching, _make, rule

_EMPTY_LIST = re.compile(r"amdgpu is not supported \(supported types:\s*\[\s*\]\)|"
                         # retold: the message without its list, or the list said to be empty
                         r"(?i:amdgpu is not supported(?!\W{0,3}\(?supported types:?\s*\[\s*gfx))")
# the override said to have been tried in words ("HSA_OVERRIDE_GFX_VERSION did nothing", "setting the override doesn't help")
_TRIED = re.compile(r"(?i)(?:HSA_OVERRIDE_GFX_VERSION|\boverride)\b.{0,40}?\b(?:did ?n.t|does ?n.t|did nothing|does nothing|"
                    r"no (?:effect|help|luck|difference)|not help|(?:is|was) ignored)")
_REJECTED = re.compile(r"amdgpu is not supported \(supported types:[^)]*\)\"?\s+gpu_type=(gfx[0-9a-f]+)")


@rule("gpu-unsupported")
def ollama_windows_accepts_no_amd_gpu(ctx: Context) -> Optional[Diagnosis]:
    if not ctx.sheet.is_windows or ctx.tool() != "ollama":
        return None
    empty = _lines_matching(ctx, _EMPTY_LIST.pattern)
    if not empty:
        return None
    rejected = sorted(set(re.findall(_REJECTED.pattern, "\n".join(ctx.sheet.lines)))) or \
        [f.value for f in ctx.sheet.of("arch") if f.value.startswith("gfx")][:1]
    tried = ctx.override() is not None or _lines_matching(ctx, r"skipping rocm gfx compatibility check") or \
        _lines_matching(ctx, _TRIED)
    if not tried or not any(arch in _APU_ARCHS for arch in rejected):
        # an empty list with no override in sight is one left in the Windows environment (overrides.py); a
        # discrete card may run once it is removed. An integrated GPU, with the override tried, has no ROCm path
        return None
    if _lines_matching(ctx, r"msg=\"inference compute\" id=\S+ library=rocm"):
        return None   # one GPU was taken: the rejected one is beside a working card (the visibility readings)
    gpus = ", ".join(rejected) or "these GPUs"
    diagnosis = _make("gpu-unsupported", f"Ollama's Windows ROCm runner accepts none of {gpus}",
                      f"the supported list Ollama reads from its Windows ROCm libraries is empty for {gpus}: it has no "
                      "library for them, and HSA_OVERRIDE_GFX_VERSION does not reach the HIP SDK's libraries on "
                      "Windows", f"Ollama's ROCm runner on Windows accepts none of {gpus}: use its Vulkan backend, "
                      "which runs on any Radeon (update Ollama: the releases after 0.12.6 carry it, experimental, with "
                      "OLLAMA_VULKAN=1 set as a user variable, enabled by default in later releases; 0.12.6 had it "
                      "only in builds from source), or the community ollama-for-amd build "
                      f"with ROCm libraries for {gpus}; remove HSA_OVERRIDE_GFX_VERSION, which does nothing here; "
                      "(an empty list for a card Ollama's Windows build does list means its lib\\ollama\\rocm folder "
                      "lost its kernel files: reinstall Ollama)",
                      [], empty)
    # no device or visibility setting can give the runner a library it does not have
    diagnosis.rank = min(family(n).rank for n in ("visibility", "override-wrong", "driver")) - 1
    return diagnosis
