"""A ggml app's prebuilt CPU code (koboldcpp's default build, llama.cpp's release binaries,
llama-cpp-python's wheels, older Ollama releases) on a CPU without AVX2: Illegal instruction at start, before any GPU
work. koboldcpp's FAQ (its old-CPU modes) and llama.cpp's build page (a build without the missing extensions).
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_ILLEGAL = re.compile(r"(?i)\billegal instruction\b|\bSIGILL\b|0xc000001d|exit (?:status|code) 132\b|非法指令|"
                      r"Ungültiger Maschinenbefehl")
_GGML_APPS = ("koboldcpp", "llama.cpp", "llama-cpp-python", "ollama", "lmstudio", "gpt4all", "whisper.cpp")
# the GPU's own fault, not the CPU's: a kernel trap, an override, a HIP / CUDA exception
_GPU_FAULT = re.compile(r"(?i)HSA_OVERRIDE_GFX_VERSION|GPU node|HW Exception|hipError|cudaError|"
                        r"illegal instruction was encountered|illegal memory access")
_NO_AVX = re.compile(r"(?i)\b(?:no|without|lacks?|missing|doesn't (?:have|support)|does not (?:have|support))\b"
                     r"[^\n]{0,20}\bAVX2?\b|\bAVX2?\b[^\n]{0,20}\b(?:not supported|unsupported|missing)\b|"
                     r"\b(?:Xeon (?:E5|E7|X5|L5|W35)|Core 2|Phenom|Pentium|Celeron|Atom|Sandy Bridge|Ivy Bridge|FX-\d{4}|"
                     r"i[357]-[23]\d{3}[a-z]?)\b")


@rule("gpu-unsupported")
def ggml_app_needs_avx2(ctx: Context) -> Optional[Diagnosis]:
    """ggml's prebuilt CPU code (koboldcpp's default build, llama.cpp's release binaries, llama-cpp-python's wheels)
    uses AVX2 / FMA / F16C; on a CPU without them the process dies with Illegal instruction at start, before any GPU
    work. koboldcpp's FAQ: its no-AVX2 mode; llama.cpp's build page: a build without the host's missing extensions."""
    tools = [t for t in ctx.sheet.tools if t in _GGML_APPS]
    said = _lines_matching(ctx, _ILLEGAL)
    text = _text(ctx)
    if not tools or not said or _GPU_FAULT.search(text):
        return None
    tool = tools[0]
    if tool == "koboldcpp":
        fix = ("start koboldcpp in its old-CPU mode: --noavx2 (the launcher's \"Old CPU, No AVX2\" preset), or "
               "--failsafe on a CPU without AVX at all; the GPU still works through --usecublas / --usevulkan")
    elif tool == "llama-cpp-python":
        fix = ("build it for this CPU: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF\" "
               "pip install --force-reinstall --no-cache-dir llama-cpp-python (add -DGGML_CUDA=on for the GPU)")
    elif tool == "ollama":
        fix = ("update Ollama: current releases choose their CPU code at run time and run on CPUs without AVX2; on an "
               "older release build it from source without the missing extensions")
    else:
        fix = ("build llama.cpp for this CPU: cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF "
               "-DGGML_F16C=OFF (plus -DGGML_CUDA=ON / -DGGML_HIP=ON / -DGGML_VULKAN=ON for the GPU), or "
               "-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON so it picks the CPU code at run time")
    # koboldcpp's own flags (LostRuins/koboldcpp:koboldcpp.py, its argument parser): --noavx2 "Do not use AVX2
    # instructions, a slower compatibility mode for older devices", --failsafe "extremely old CPU compatibility mode
    # that should work on all devices"
    fix += "; grep -o -w 'avx2' /proc/cpuinfo | head -1 prints nothing on such a CPU"
    return _make(
        "gpu-unsupported", f"{tool}'s CPU code needs AVX2 this CPU lacks",
        f"{tool}'s prebuilt CPU code uses AVX2 / FMA / F16C instructions; this CPU does not have them, so the process "
        "is killed with Illegal instruction as it starts, before the GPU is used",
        fix, said[:1], said[:1], confirmed=bool(_NO_AVX.search(text)))
