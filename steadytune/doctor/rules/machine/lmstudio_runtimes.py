"""LM Studio running its CPU llama.cpp runtime on a machine with a GPU: the GPU runtimes (CUDA,
Vulkan, ROCm) are downloaded and selected separately, so a GPU is never used until one is. LM Studio's runtimes page.
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule


_CPU_RUNTIME = re.compile(r"(?i)\bCPU (?:llama\.cpp|runtime)\b|\bruntime\b[^\n]{0,20}\bCPU\b|\bllama\.cpp[^\n]{0,10}"
                          r"\(?CPU\)?\b")


@rule("torch-build")
def lmstudio_cpu_runtime(ctx: Context) -> Optional[Diagnosis]:
    """LM Studio runs GGUF models through a llama.cpp runtime it downloads (CPU, CUDA, Vulkan, ROCm); with the CPU
    runtime selected a GPU in the machine is never used. LM Studio's runtimes page: pick the GPU's runtime."""
    # the runtime names as LM Studio lists them: "CUDA 12 llama.cpp (Linux)" (lmstudio-ai/lmstudio-bug-tracker#966),
    # "Vulkan llama.cpp (Windows)" (#1041); Ctrl+Shift+R opens the runtimes page (#1925)
    if "lmstudio" not in ctx.sheet.tools:
        return None
    said = _lines_matching(ctx, _CPU_RUNTIME)
    archs = ctx.sheet.machine_archs
    if not said or not archs:
        return None
    arch = archs[0]
    if arch.startswith("sm_"):
        runtime = "the CUDA 12 llama.cpp runtime (CUDA llama.cpp on older drivers)"
    elif arch.startswith("gfx"):
        runtime = (f"the Vulkan llama.cpp runtime (the ROCm llama.cpp runtime where it lists {arch}; the card is "
                   f"{arch})")
    else:
        runtime = "the Vulkan llama.cpp runtime"
    gpu = ctx.sheet.first("gpu")
    name = gpu.value if gpu else arch
    return _first(_make(
        "torch-build", "LM Studio runs its CPU runtime",
        f"LM Studio's selected runtime for GGUF is its CPU build of llama.cpp, which never uses the {name}; the GPU "
        "runtimes are downloaded and selected separately",
        f"open the runtimes page (Ctrl+Shift+R, or Settings > Runtime), download and select {runtime} for GGUF, then "
        "load the model again with GPU offload raised (the model's load settings, GPU Offload to the most layers that "
        "fit)", said[:1], said[:1]))
