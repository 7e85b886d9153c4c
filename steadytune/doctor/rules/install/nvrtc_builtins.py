"""NVRTC's builtins library not found: the runtime compiler (TorchScript's fusers, torch's jiterator, CuPy, a
kernel library that compiles at first use) dlopens libnvrtc-builtins.so.<major>.<minor>, the one of its own CUDA
release, from the loader's path. NVRTC's documentation lists it as a file that must ship beside libnvrtc
(docs.nvidia.com/cuda/nvrtc, "Installation"); pip's nvidia-cuda-nvrtc wheel carries both (CUDA 11/12 as
nvidia-cuda-nvrtc-cuXX in nvidia/cuda_nvrtc/lib, CUDA 13 as nvidia-cuda-nvrtc 13.x in nvidia/cu13/lib). A copy
under another name (an unversioned libnvrtc-builtins.so, a wheel that packed the file without its version) or of
another CUDA release is not opened.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule


_BUILTINS = re.compile(r"(?i)(?:failed to open|cannot open|could not (?:open|load)|not found)\W{0,3}(?:\S*/)?"
                       r"libnvrtc-builtins\.so\.(\d+)(?:\.(\d+))?|libnvrtc-builtins\.so\.(\d+)(?:\.(\d+))?\W{0,3}"
                       r"(?::|is)? ?(?:cannot open|not found|No such file)")


def _wheel(major: int, version: str) -> tuple[str, str]:
    """(the pip requirement, the folder in site-packages its libraries land in) of NVRTC for a CUDA release: the
    builtins' name carries the minor, so the wheel is pinned to it."""
    if major >= 13:
        return f'"nvidia-cuda-nvrtc=={version}.*"', f"nvidia/cu{major}/lib"
    return f'"nvidia-cuda-nvrtc-cu{major}=={version}.*"', "nvidia/cuda_nvrtc/lib"


@rule("rocm-libs-missing")
def nvrtc_builtins_missing(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _BUILTINS)
    if not lines:
        return None
    m = _BUILTINS.search(lines[0].line)
    major = int(m.group(1) or m.group(3))
    minor = m.group(2) or m.group(4)
    version = f"{major}.{minor}" if minor else str(major)
    name = f"libnvrtc-builtins.so.{version}"
    requirement, folder = _wheel(major, version)
    return _first(_make("rocm-libs-missing", f"NVRTC cannot open {name}",
                        f"a kernel is compiled at run time with NVRTC (CUDA {version}'s runtime compiler: TorchScript's "
                        f"fuser, the jiterator, CuPy), which opens {name}, the builtins of its own CUDA release; no "
                        "folder the loader searches has a file of that exact name (the torch wheel's torch/lib copy "
                        "is missing, unversioned or of another CUDA, and the system's is another release)",
                        f"install CUDA {version}'s NVRTC as a wheel and put it first on the loader's path: pip install "
                        f"{requirement} (or CUDA {version}'s toolkit, whose lib64 has it); export LD_LIBRARY_PATH="
                        f"<site-packages>/{folder}:$LD_LIBRARY_PATH (ls it: {name} must be there); a torch wheel "
                        "whose torch/lib has only an unversioned libnvrtc-builtins.so is a packaging fault of that "
                        "wheel: a rebuilt release or the conda package carries the versioned file (or link it: ln -s "
                        f"libnvrtc-builtins.so torch/lib/{name})", [ctx.line_fact(lines[0])], lines))
