"""CUDA kernels a program compiles itself, with torch's C++ extension tools, at run time or from a bundled build script:
they need a full CUDA toolkit (nvcc and the CUDA headers) of torch's own CUDA release beside the pip torch, which
carries only the runtime libraries.

  a JIT kernel falling back       a model's fused CUDA kernel built on first use (BigVGAN's anti-aliased activation in
                                  IndexTTS and other vocoders: torch.utils.cpp_extension.load) that "failed to load" and
                                  falls back to plain torch: no toolkit, or another release than torch's
                                  (index-tts/index-tts#176: conda's nvidia/label/cuda-12.4.0::cuda-toolkit beside torch
                                  2.5.1+cu124 made it build and load; the channel form checked v18b in public setup
                                  scripts: conda install -c nvidia/label/cuda-12.4.0 cuda-toolkit)
  a portable's compile script     a Windows portable bundle's script (its own python_standalone / python_embeded)
                                  compiling a CUDA extension with ninja and failing: the bundle has torch but no
                                  toolkit; its README names the CUDA Toolkit of the bundled torch and Visual Studio's
                                  C++ build tools (Hunyuan3D-2-WinPortable's README: CUDA Toolkit 12.4.1, only
                                  "Libraries and Compilers", and VS Build Tools 2022's "Desktop development with C++";
                                  YanWenKun/Hunyuan3D-2-WinPortable#8)
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule


_JIT_FAILED = re.compile(r"(?i)failed to (?:load|build|compile) (?:the )?(?:custom|fused|jit) (?:CUDA )?kernels?\b|"
                         r"custom CUDA kernels?\b.{0,60}\bfalling back\b")
# torch's CUDA as the paste says it: the wheel's +cuXYZ, or "cuda: 12.4" / "CUDA 12.4" beside torch
_TORCH_CU = re.compile(r"\btorch[=\s:]*[\d.]+\+cu(\d{2,3})\b")
_CUDA_SAID = re.compile(r"(?i)(?<![\w])cuda(?: version)?\s*[:=]?\s*v?(1[0-3])\.(\d)\b")


def _torch_cuda(text: str) -> Optional[str]:
    """torch's CUDA release X.Y where the paste gives it."""
    wheel = _TORCH_CU.search(text)
    if wheel:
        digits = wheel.group(1)
        return f"{digits[:-1]}.{digits[-1]}"
    said = _CUDA_SAID.search(text)
    return f"{said.group(1)}.{said.group(2)}" if said else None


def _jit_kernel(ctx: Context, text: str) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _JIT_FAILED)
    if not lines:
        return None
    release = _torch_cuda(text)
    toolkit = (f"conda install -c nvidia/label/cuda-{release}.0 cuda-toolkit (the CUDA {release} toolkit, torch's own "
               f"release) in the environment, or NVIDIA's cuda-toolkit-{release.replace('.', '-')} system-wide with "
               "CUDA_HOME pointing at it" if release else
               "the CUDA toolkit of torch's own release (python -c 'import torch; print(torch.version.cuda)'): conda "
               "install -c nvidia/label/cuda-<that release>.0 cuda-toolkit, or NVIDIA's installer, with CUDA_HOME "
               "pointing at it")
    return _make("rocm-libs-missing", "the program's CUDA kernel is compiled at run time without a CUDA toolkit",
                 "the kernel is built on first use with torch's C++ extension tools, which need nvcc and the CUDA "
                 "headers of torch's CUDA release; a pip torch brings only the runtime libraries, so the build fails "
                 "and the program falls back to slower plain torch",
                 f"install the full toolkit: {toolkit}, with ninja and a C++ compiler (build-essential); then delete "
                 "the stale build folder (~/.cache/torch_extensions, or the program's own build/ folder) and start "
                 "again", [ctx.line_fact(lines[0])], lines[:1])


# a Windows portable bundle: its own embedded Python beside the app
_PORTABLE = re.compile(r"(?i)\\python_(?:standalone|embeded|embedded)\\|\bWinPortable\b|\bportable\b.{0,40}\bwindows\b")
_NINJA_FAILED = re.compile(r"(?i)ninja: build stopped: subcommand failed|_run_ninja_build|Error compiling objects for "
                           r"extension|Command '\['ninja', '-v'\]' returned non-zero")
# the portables' READMEs, by the bundle a paste's paths name: (pattern, CUDA toolkit release)
_PORTABLE_TOOLKITS = ((re.compile(r"(?i)Hunyuan3D-?2[\w.-]*WinPortable|Hunyuan3D2_WinPortable"), "12.4.1"),)


def _portable_compile(ctx: Context, text: str) -> Optional[Diagnosis]:
    if not (on_windows(ctx, text) or re.search(r"[A-Z]:\\", text)) or not _PORTABLE.search(text):
        return None
    lines = _lines_matching(ctx, _NINJA_FAILED)
    if not lines or re.search(r"(?i)\bnvcc fatal\b|unsupported Microsoft Visual Studio|\bcl\.exe\b.{0,40}not found",
                              text):
        return None   # nvcc's own complaint (a Visual Studio it refuses, a missing cl.exe) is the build readings' case
    known = next((release for names, release in _PORTABLE_TOOLKITS if names.search(text)), None)
    release = known or _torch_cuda(text)
    which = (f"CUDA Toolkit {release} (the release the bundle's torch is built with; in its installer only "
             "\"Libraries and Compilers\" are needed)" if release else
             "the CUDA Toolkit of the bundled torch's release (python_standalone\\python.exe -c \"import torch; "
             "print(torch.version.cuda)\"; in its installer only the libraries and compilers are needed)")
    return _make("rocm-libs-missing", "the portable bundle compiles a CUDA extension without a CUDA toolkit",
                 "the bundle's script builds the extension's CUDA code with torch's C++ extension tools and ninja; the "
                 "bundle carries torch and its runtime libraries but not nvcc and the CUDA headers, which must be "
                 "installed on the machine in torch's own CUDA release",
                 f"install {which}, and Visual Studio Build Tools 2022 with the \"Desktop development with C++\" "
                 "workload; then open a new console and run the compile script again", [ctx.line_fact(lines[0])],
                 lines[:1], confirmed=known is not None)


@rule("rocm-libs-missing")
def jit_kernels(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a program's own CUDA kernel that failed to build at run time (and fell back), or a Windows portable
    bundle's compile script stopping in ninja."""
    text = _text(ctx)
    return _jit_kernel(ctx, text) or _portable_compile(ctx, text)
