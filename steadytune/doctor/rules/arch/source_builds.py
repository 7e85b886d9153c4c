"""A ROCm built from source (TheRock) whose runtime finds no device on the machine's GPU: the build, or the runtime's
own device list, does not carry that GPU's target, so the GPU is skipped and HIP reports no device at all.

Sources: TheRock's README (the GPU targets of a build are chosen at configure time, -DTHEROCK_AMDGPU_FAMILIES= or
-DTHEROCK_AMDGPU_TARGETS=, from the list in cmake/therock_amdgpu_targets.cmake); ROCm/rocm-systems#2075 (hipInfo from
a TheRock build on Windows skipping a gfx1152 the runtime's device tables did not list, fixed by adding it there)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text
from steadytune.hardware.gpu_facts import normalise_gfx


# a ROCm of the user's own build: TheRock's checkout or build folder, or the words for it
_OWN_BUILD = re.compile(r"(?i)\b(?:built|building|compiled|compiling)\b.{0,40}\bTheRock\b|\bTheRock\b.{0,40}\b(?:build|"
                        r"built|compile\w*|from source)\b|[\\/]TheRock[\\/]|\bTheRock[\\/](?:build|rocm-systems)\b")
_NO_DEVICE = re.compile(r"(?i)no ROCm-capable device is detected|hipErrorNoDevice|\bNo HIP GPUs are available\b|"
                        r"hipGetDeviceCount\W.{0,40}\b0\b")
_GFX = re.compile(r"(?i)\bgfx(1[0-2]\d[0-9a-f]|9[0-5][0-9a-f])\b")


@rule("arch-missing")
def own_build_without_the_target(ctx: Context) -> Optional[Diagnosis]:
    """TheRock built by the user, and its runtime reporting no device on a GPU the paste names by its gfx target."""
    text = _text(ctx)
    if not _OWN_BUILD.search(text) or re.search(r"(?i)\bimport torch\b|\btorch\.", text):
        return None   # a torch from TheRock's indexes is the install readings' (its device package)
    none = _lines_matching(ctx, _NO_DEVICE)
    named = _GFX.search(text)
    if not none or named is None:
        return None
    arch = normalise_gfx("gfx" + named.group(1).lower())
    windows = ctx.sheet.is_windows or re.search(r"(?i)\b[A-Z]:\\|\bwindows\b", text)
    return _make("arch-missing", f"this ROCm build does not know {arch}",
                 f"the runtime of this self-built ROCm skips the {arch} GPU (the build's targets, or the runtime's own "
                 "device list, do not include it), so HIP reports no device at all",
                 f"build TheRock for this GPU: cmake -B build -GNinja . -DTHEROCK_AMDGPU_TARGETS={arch} (and check "
                 f"that cmake/therock_amdgpu_targets.cmake lists {arch}; a target missing there is not supported by "
                 "that checkout yet)"
                 + ("; on Windows the HIP runtime also needs the GPU in its own device tables, so a GPU newer than "
                    "the checkout's runtime stays invisible until a newer checkout (or AMD's fix upstream) adds it"
                    if windows else "")
                 + "; then rerun hipinfo (or rocminfo) to see the device",
                 [], none)
