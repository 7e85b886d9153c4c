"""ROCm's compiler without the C++ standard headers: ROCm's clang (hipcc, and hipRTC / comgr, through which MIOpen and
other libraries compile their kernels at first use) takes the newest GCC installed as its C++ runtime, and when that
GCC's libstdc++-N-dev is not installed (Ubuntu 22.04 with gcc-12's runtime but only libstdc++-11-dev; a minimal 24.04
server), every compile fails with "'cmath' file not found" or "unable to find library -lstdc++". In a program that
only uses the GPU, that compile happens inside MIOpen at the first convolution, and the process aborts.

Sources: ROCm/MIOpen#1921 (ROCm 5.4, Ubuntu 22.04: 'cmath' not found, -lstdc++ not found; sudo apt install
libstdc++-12-dev), ROCm/legacy-rocm-build#1843 and #4612 (clang picks the newest GCC's runtime; install its
libstdc++-dev; libstdc++-14-dev on 24.04; resolved in ROCm 7.1.0), ROCm/MIOpen#629 (MIOpen's kernel compile failing on
'cmath'), Comfy-Org/ComfyUI#143 (a ROCm torch aborting with "IOT instruction (core dumped)" on Ubuntu, fixed by
libstdc++-12-dev)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _vendor, rule, _text

# (round 20, r20a: the header said without clang's "fatal error:" prefix too, as a title or a retelling quotes it:
# "'cmath' file not found error for AMD builds", llama.cpp#6523, fixed by libstdc++-12-dev)
_NO_HEADER = re.compile(r"(?:fatal error: )?['`\"‘](?:cmath|limits|string|cstdlib|cstdint|type_traits|utility|new|"
                        r"cstddef)['`\"’] file not found|unable to find library -lstdc\+\+|cannot find -lstdc\+\+")
_ABORT = re.compile(r"(?i)\bIOT instruction\b|Aborted \(core dumped\)|\bSIGABRT\b|core dumped")
_ROCM_TORCH = re.compile(r"(?i)\+rocm\d|\brocm\b|\bROCm\b")
_PYTHON_ERROR = re.compile(r"(?m)^\W*(?:\w+\.)*\w*(?:Error|Exception):\s")
# the GCC each Ubuntu release's ROCm packages pull in, whose libstdc++-N-dev the compiler then wants
_UBUNTU_GCC = {"22.04": "12", "24.04": "14"}


def _package(ctx: Context, text: str) -> str:
    ubuntu = re.search(r"(?i)ubuntu\s*(\d\d\.04)", text)
    gcc = re.search(r"(?i)\b(?:gcc|g\+\+)[- ](\d{2})\b", text)
    version = (gcc.group(1) if gcc else None) or (_UBUNTU_GCC.get(ubuntu.group(1)) if ubuntu else None) or "12"
    return f"libstdc++-{version}-dev"


@rule("rocm-libs-missing")
def rocm_compiler_without_cxx_headers(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    said = _lines_matching(ctx, _NO_HEADER)
    check = ("ls /usr/lib/gcc/x86_64-linux-gnu/ shows the GCC releases the compiler sees; the newest one's "
             "libstdc++-N-dev must be installed")
    if said:
        package = _package(ctx, text)
        return _make("rocm-libs-missing", "ROCm's compiler finds no C++ standard headers",
                     "ROCm's clang takes the newest GCC installed as its C++ runtime, and that GCC's development "
                     "package (its headers and libstdc++.so link) is not installed, so every HIP compile fails, the "
                     "kernels MIOpen compiles at first use too",
                     f"sudo apt install {package} (the libstdc++ development package of the newest GCC installed; "
                     f"{check}); ROCm 7.1 and newer no longer need it", [], said[:1])
    # only an abort of a ROCm torch program, with no Python error of its own: the likely reading
    aborted = _lines_matching(ctx, _ABORT)
    if not aborted or _vendor(ctx) != "amd" or not _ROCM_TORCH.search(text) or _PYTHON_ERROR.search(text):
        return None
    if not re.search(r"(?i)ubuntu|debian|mint|pop!_os", text) or any(e.family in ("gpu-hang", "arch-missing",
                                                                                  "override-wrong") for e in ctx.errors):
        return None
    package = _package(ctx, text)
    return _make("rocm-libs-missing", "the process aborts where ROCm compiles its first kernel",
                 "a ROCm program that aborts (SIGABRT, 'IOT instruction') with no error of its own at its first GPU "
                 "work is, on Ubuntu and Debian, most often ROCm's compiler failing inside MIOpen: it takes the newest "
                 "GCC installed as its C++ runtime and finds no headers for it ('cmath' file not found)",
                 f"sudo apt install {package} ({check}); to see the compile error itself, run once with "
                 "MIOPEN_LOG_LEVEL=5", [], aborted[:1], confirmed=False)
