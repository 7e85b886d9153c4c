"""A GFX9 name that no compiler targets (gfx903, gfx905): runtimes and device tables of some releases name such chips,
but LLVM's AMDGPU backend has no processor of that name, so no library (rocBLAS, a program's kernels) can be compiled
for it. Asking for a build for it cannot succeed; a backend that does not compile for the arch (Vulkan) can."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

# GFX9 processors of LLVM's AMDGPU backend (llvm.org/docs/AMDGPUUsage.html processor table; clang's OffloadArch list):
# a closed family, so a gfx9 name outside it is no target at all (later families still grow, so they are not judged)
_GFX9_TARGETS = frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c", "gfx940",
                           "gfx941", "gfx942", "gfx950"})
# a build asked for, support asked about, or a failure
_ASKED = re.compile(r"(?i)\bcompile\w*|\bbuild\w*|\bsupport\w*|\?|？|编译|支持|not (?:work|run)\w*|fail\w*|error")


@rule("gpu-unsupported")
def no_compiler_targets_it(ctx: Context) -> Optional[Diagnosis]:
    named = [f for f in ctx.sheet.of("arch") + ctx.sheet.of("built_for")
             if re.fullmatch(r"gfx9[0-9a-f]{2}", f.value) and f.value not in _GFX9_TARGETS]
    if not named:
        return None
    arch = named[0].value
    asked = [line for line in _lines_matching(ctx, _ASKED.pattern) if arch in line.line.lower()][:1] or \
        _lines_matching(ctx, _ASKED.pattern)[:1]
    if not asked:
        return None
    return _make("gpu-unsupported", f"{arch} is no compiler target",
                 f"LLVM's AMDGPU backend has no processor named {arch} (its GFX9 targets are gfx900, gfx902, gfx904, "
                 "gfx906, gfx908, gfx909, gfx90a, gfx90c, gfx940-942 and gfx950), so no rocBLAS or other HIP library "
                 "can be compiled for it and the HIP runtime has no code for it",
                 f"{arch} is not supported by the HIP runtime or its libraries, and no build for it can be made (no "
                 "compiler targets it): use a backend that does not compile for the arch, Vulkan (llama.cpp "
                 "-DGGML_VULKAN=ON, Ollama's or LM Studio's Vulkan runner), or the CPU", named[:1], asked)
