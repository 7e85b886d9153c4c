"""A ggml program (whisper.cpp, llama.cpp, stable-diffusion.cpp) built from source with a CMake line that asks for no
GPU backend, and then said to find or use no GPU: ggml compiles only the CPU backend unless a backend option is
given (-DGGML_CUDA=1, -DGGML_HIP=ON, -DGGML_VULKAN=ON, ...), whatever CUDA or ROCm the machine has. A BLAS option
(OpenBLAS) speeds up the CPU only.

Sources: whisper.cpp's README (NVIDIA GPU support: cmake -B build -DGGML_CUDA=1; Vulkan: -DGGML_VULKAN=1; the
WHISPER_CUBLAS / WHISPER_CUDA names of older releases); llama.cpp's docs/build.md (GGML_CUDA, GGML_HIP with
AMDGPU_TARGETS, GGML_VULKAN, GGML_METAL); ggml-org/whisper.cpp#3449 (a CPU-only build of a Slackware package)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (NOT_DETECTED, Context, Diagnosis, _lines_matching, _make, _text, _vendor,
                                          rule)

_PROGRAM = re.compile(r"(?i)\bwhisper\.cpp\b|\bllama\.cpp\b|\bstable-diffusion\.cpp\b|\bsd\.cpp\b|\bggml\b")
_CMAKE = re.compile(r"(?i)(?:^|\s)cmake\b")
# every GPU backend's option, current and old names (GGML_, LLAMA_, WHISPER_, SD_ prefixes)
_BACKEND = re.compile(r"(?i)-D\s*(?:GGML|LLAMA|WHISPER|SD)_(?:CUDA|CUBLAS|HIP|HIPBLAS|VULKAN|METAL|SYCL|OPENCL|CLBLAST|"
                      r"KOMPUTE|MUSA|CANN|COREML|OPENVINO)\b")
_NO_GPU = re.compile(NOT_DETECTED + r"|(?i:\bno (?:cuda |vulkan |rocm )?(?:gpu|device)s? (?:found|detected|available)\b|"
                     r"\b(?:only|just) (?:uses?|runs? on) (?:the )?cpu\b|\bnot (?:using|use) (?:the |my )?gpu\b|"
                     r"\bruns? on (?:the )?cpu\b)")


@rule("torch-build")
def ggml_program_built_without_a_gpu_backend(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _PROGRAM.search(text) or not _CMAKE.search(text) or _BACKEND.search(text):
        return None
    # the configure command: a cmake line (or its continuation lines) with -D options
    if not re.search(r"(?i)-D\s*\w+[:=]", text):
        return None
    said = _lines_matching(ctx, _NO_GPU)
    if not said:
        return None
    program = _PROGRAM.search(text).group(0)
    vendor = _vendor(ctx)
    arch, _fact = ctx.arch()
    if vendor == "amd" or (arch or "").startswith("gfx"):
        flag = f"-DGGML_HIP=ON -DAMDGPU_TARGETS={arch or '<your gfx>'}"
    elif vendor == "nvidia" or re.search(r"(?i)\bnvidia\b|\bcuda\b|\bgeforce\b|\brtx\b|\bgtx\b", text):
        flag = "-DGGML_CUDA=1"
    else:
        flag = "-DGGML_CUDA=1 (NVIDIA; -DGGML_HIP=ON with -DAMDGPU_TARGETS=<gfx> for AMD, -DGGML_VULKAN=1 for any Vulkan GPU)"
    return _make("torch-build", f"{program} was built without a GPU backend",
                 f"the CMake line that built {program} asks for no GPU backend, so only ggml's CPU backend was "
                 "compiled: the program finds no GPU whatever CUDA or driver the machine has (a BLAS option such as "
                 "OpenBLAS speeds up the CPU only)",
                 f"configure again with the GPU backend: cmake -B build {flag} (plus your other options), then cmake "
                 "--build build --config Release; the program's start-up log then names the GPU (older releases "
                 "called the option WHISPER_CUDA / LLAMA_CUDA)", [], said[:1])
