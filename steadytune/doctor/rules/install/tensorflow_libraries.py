"""TensorFlow's GPU libraries installed but not found by the loader, on Linux.

  - tensorflow[and-cuda] (2.14 and later) brings CUDA and cuDNN as pip's nvidia-* wheels, inside site-packages/
    nvidia/*/lib; TensorFlow dlopens them by soname, and where its own search of those folders misses (2.16.1 and
    2.17's release candidates did: tensorflow/tensorflow#63362) it finds no GPU and lists none, silently. Putting
    the wheels' lib folders on LD_LIBRARY_PATH makes them found.
  - tensorflow-rocm links ROCm's libraries from the ROCm release it was built with; a newer ROCm installed by
    amdgpu-install lives in /opt/rocm-X.Y.Z, which the loader does not search until it is on LD_LIBRARY_PATH (AMD's
    install guide added `export LD_LIBRARY_PATH=/opt/rocm/lib` after ROCm/ROCm#1607).
Native Windows (no GPU build after 2.10) is wheels' reading.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule


# TensorFlow's own query answered with an empty list (on the line, or on the next one in an interactive session)
# (told in words: "list_physical_devices gives an empty list", the call named without its argument)
_EMPTY_LIST = re.compile(r"(?i)list_physical_devices\(\s*['\"]GPU['\"]\s*\)|list_physical_devices\(.GPU.\)|"
                         r"list_physical_devices\b(?!\s*\()")
_EMPTY = re.compile(r"(?i)\[\s*\]|empty list|returns? nothing|\bno GPUs?\b")
_AND_CUDA = re.compile(r"(?i)tensorflow\[and-cuda\]|\band-cuda\b")
# the loader's words for libraries it cannot find, said in prose too ("linker unable to find shared objects")
_SHARED_OBJECTS = re.compile(r"(?i)(?:unable to|can ?not|cannot|can't|fails? to|doesn't|does not) (?:find|load|open|"
                             r"locate) (?:the |its |any )?(?:shared (?:objects?|librar\w+)|\.so files?|librar\w+)|"
                             r"cannot open shared object file")


_CANNOT_DLOPEN = re.compile(r"Cannot dlopen some GPU libraries")
_WSL = re.compile(r"(?i)(?<![A-Za-z])wsl ?2?(?![A-Za-z])")


def _empty_gpu_list(ctx: Context) -> list[ErrorLine]:
    lines = ctx.sheet.lines
    return [ErrorLine(n, line.strip(), None) for n, line in enumerate(lines, 1)
            if _EMPTY_LIST.search(line) and _EMPTY.search(" ".join(lines[n - 1: n + 1])[-200:] if n < len(lines)
                                                        else line)]


@rule("rocm-libs-missing")
def tensorflow_gpu_libraries_not_found(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    # WSL 2 is Linux ("a WSL distribution on Windows 11" names Windows too)
    wsl = ctx.sheet.has("platform", "wsl") or _WSL.search(text)
    if not re.search(r"(?i)\btensorflow|\btf\b", text) or (on_windows(ctx, text) and not wsl):
        return None
    if re.search(r"(?i)tensorflow-rocm|tensorflow.{0,80}\brocm\b|\brocm\b.{0,80}tensorflow", text):
        said = _lines_matching(ctx, _SHARED_OBJECTS)
        if not said:
            return None
        return _make("rocm-libs-missing", "tensorflow-rocm does not find the ROCm libraries",
                     "tensorflow-rocm links ROCm's HIP, rocBLAS and MIOpen libraries, built against one ROCm release; "
                     "the ROCm installed here lives in /opt/rocm-X.Y.Z (linked as /opt/rocm), a folder the loader "
                     "does not search, so the wheel's libraries are not found",
                     "export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH (in ~/.bashrc; or echo /opt/rocm/lib | "
                     "sudo tee /etc/ld.so.conf.d/rocm.conf && sudo ldconfig), and install the tensorflow-rocm release "
                     "built for the installed ROCm (pip install tensorflow-rocm==<the release AMD's table lists for "
                     "it>)", [ctx.line_fact(said[0])], said)
    # TensorFlow's own warning that it skipped the GPU counts as the empty list
    empty = _empty_gpu_list(ctx) or _lines_matching(ctx, _CANNOT_DLOPEN)
    if not empty or not _AND_CUDA.search(text) or re.search(r"(?i)\brocm\b|\bAMD\b|Radeon", text):
        return None
    return _make("rocm-libs-missing", "TensorFlow does not find the CUDA libraries its [and-cuda] wheels installed",
                 "tensorflow[and-cuda] installs CUDA and cuDNN as pip's nvidia-* wheels inside site-packages/nvidia/"
                 "*/lib; this TensorFlow does not find them there (its lookup misses the wheels' folders), loads no "
                 "CUDA library and lists no GPU, without an error",
                 "put the wheels' lib folders on the loader's path before starting Python: export LD_LIBRARY_PATH="
                 "$(python -c 'import os, nvidia; d = nvidia.__path__[0]; print(\":\".join("
                 "os.path.join(d, p, \"lib\") for p in os.listdir(d) if os.path.isdir(os.path.join(d, p, \"lib\"))))')"
                 ":$LD_LIBRARY_PATH (in the venv's bin/activate to keep it); python -c \"import tensorflow as tf; "
                 "print(tf.config.list_physical_devices('GPU'))\" must then list the GPU; TF_CPP_MAX_VLOG_LEVEL=3 shows "
                 "which library it failed to open; or install the CUDA 12 toolkit this TensorFlow is built for "
                 "(TensorFlow's tested build configurations list it; not a CUDA 13"
                 + (", and inside WSL, not on the Windows side" if wsl else "") + ") and export "
                 "PATH=/usr/local/cuda-12/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda-12/lib64:$LD_LIBRARY_PATH in "
                 "~/.bashrc", [ctx.line_fact(empty[0])], empty)
