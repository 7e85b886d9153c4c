"""cuDNN installed on Windows by NVIDIA's own packages, yet a program cannot load its DLLs. Two layouts of NVIDIA's make
the "install cuDNN" answer wrong where the user says it is installed:
  - cuDNN 9's Windows installer puts the DLLs one folder below the bin folder it adds to PATH, in a folder named after
    the CUDA release it was built with (C:\\Program Files\\NVIDIA\\CUDNN\\v9.7\\bin\\12.8\\cudnn_ops64_9.dll), and PATH is
    not searched recursively;
  - cuDNN 8 from 8.3 on loads zlibwapi.dll, which Windows does not have: the DLL cuDNN's loader names ("Could not load
    library cudnn_cnn_infer64_8.dll. Error code 126") is there, one of its dependencies is not (NVIDIA's cuDNN 8
    install guide for Windows, "Installing Zlib"; cupy issue 6226 for the 8.3.0 change).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

# cuDNN 9 minor -> the CUDA 12 folder its Windows installer creates under bin (paths users and projects quote:
# v9.1\bin\12.4, v9.3..v9.6\bin\12.6, v9.7 and v9.8\bin\12.8, v9.9..v9.13\bin\12.9); its CUDA 11 build goes to
# bin\11.8, its CUDA 13 build (9.13 on) to bin\13.0. Releases past the table: the installed CUDA's folder, to be checked
# with dir
_CUDNN9_CUDA12_FOLDER = {1: "12.4", 3: "12.6", 4: "12.6", 5: "12.6", 6: "12.6", 7: "12.8", 8: "12.8", 9: "12.9",
                         10: "12.9", 11: "12.9", 12: "12.9", 13: "12.9"}

# a cuDNN DLL the program says it cannot load: cudnn_ops64_9.dll, cudnn_cnn_infer64_8.dll, cudnn64_9.dll
_CUDNN_DLL = re.compile(r"(?i)\b(cudnn(?:_(\w+?))?64_([89]))\.dll\b")
_NOT_LOADED = re.compile(r"(?i)could not (?:locate|load|find)|cannot (?:load|find)|not (?:be )?found|error code 126|"
                         r"WinError 126|is not in your library path|make sure .{0,40} in your library path")
# the user's cuDNN release ("cudnn ver 9.70", "cuDNN 9.7.0", "CUDNN：8.9.1") or the installer's folder (CUDNN\v9.7)
_CUDNN_SAID = re.compile(r"(?i)\bcudnn\s*(?:ver(?:sion)?\.?)?\s*[:：=]?\s*v?([89])\.(\d{1,2})\b|\bCUDNN[\\/]+v([89])\.(\d{1,2})\b|"
                         r"\bcudnn-windows-x86_64-([89])\.(\d{1,2})\.")   # NVIDIA's archive name, cudnn-windows-x86_64-8.6.0.163_cuda11-archive
_CUDA_SAID = re.compile(r"(?i)\bcuda(?:\s*toolkit)?\s*(?:ver(?:sion)?\.?)?\s*[:：=]?\s*v?(1[1-3])\.(\d)\b")
# the user's word that the DLL (or its folder) is there or on PATH
_IS_THERE = re.compile(r"(?i)\b(?:directory|folder|path)\b.{0,30}\b(?:is there|exists?|is (?:set|added|in))|\bin (?:my |the )?"
                       r"(?:system )?(?:PATH|environment variables)\b|\badded\b.{0,40}\bto (?:the )?PATH\b|\b(?:is|are) "
                       r"(?:there|present|installed)\b|\bcudnn\b.{0,20}\binstalled\b")
_ZLIB_MISSING = re.compile(r"(?i)zlibwapi\.dll")
# a crash said to happen inside a cuDNN 8 DLL that did load ("the error occurs in cudnn64_8.dll", 报错出现在cudnn64_8.dll里面,
# "exception in cudnn_cnn_infer64_8.dll"): cuDNN 8.3+ calling into the zlibwapi.dll Windows does not have
_CRASH_IN_CUDNN8 = re.compile(r"(?i)(?:异常|exception|crash\w*|崩溃|报错|fault\w*|error (?:occurs?|happens?|is) (?:in|inside))"
                              r"[^\n]{0,20}(?<![A-Za-z0-9_])cudnn\w*64_8\.dll|(?<![A-Za-z0-9_])cudnn\w*64_8\.dll[^\n]{0,12}(?:异常|exception|crash|"
                              r"崩溃|里面|fault)")


def _cudnn_minor(text: str, major: str) -> Optional[int]:
    """The cuDNN minor the user names for this major; "9.70" (a user's 9.7.0) reads as 7."""
    for m in _CUDNN_SAID.finditer(text):
        if (m.group(1) or m.group(3) or m.group(5)) == major:
            minor = m.group(2) or m.group(4) or m.group(6)
            return int(minor[0]) if len(minor) == 2 and minor.endswith("0") and int(minor) >= 30 else int(minor)
    return None


@rule("rocm-libs-missing")
def cudnn_installed_but_not_loaded(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    zlib = _lines_matching(ctx, _ZLIB_MISSING)
    failing = [e for e in _lines_matching(ctx, _CUDNN_DLL) if _NOT_LOADED.search(e.line)]
    if zlib and _NOT_LOADED.search(" ".join(e.line for e in zlib)):
        return _zlib(ctx, zlib[:1], None)
    crashed = _lines_matching(ctx, _CRASH_IN_CUDNN8)
    if crashed and not failing:
        minor = _cudnn_minor(text, "8")
        # only where the user's cuDNN is 8.3 or newer (before 8.3 cuDNN needed no zlib)
        return _zlib(ctx, crashed[:1], None) if minor is not None and minor >= 3 else None
    if not failing:
        return None
    m = _CUDNN_DLL.search(failing[0].line)
    major, part = m.group(3), (m.group(2) or "").lower()
    minor = _cudnn_minor(text, major)
    if major == "9":
        if minor is None:
            return None   # cuDNN 9 not said to be installed: installing it is the answer (libraries_missing)
        cuda = _CUDA_SAID.search(text)
        cuda_major = cuda.group(1) if cuda else "12"
        folder = ("11.8" if cuda_major == "11" else "13.0" if cuda_major == "13" else
                  _CUDNN9_CUDA12_FOLDER.get(minor) or (f"{cuda.group(1)}.{cuda.group(2)}" if cuda else "12.x"))
        root = f"C:\\Program Files\\NVIDIA\\CUDNN\\v9.{minor}\\bin"
        return _make("rocm-libs-missing", f"cuDNN 9.{minor}'s DLLs are one folder below the one on PATH",
                     f"NVIDIA's cuDNN 9 installer for Windows puts {m.group(1)}.dll and the other cuDNN DLLs in a "
                     f"folder per CUDA release under its bin folder ({root}\\{folder}), while PATH gets only {root}; "
                     "PATH is not searched below that, so the program does not find them",
                     f"add {root}\\{folder} to PATH (the folder inside bin that holds cudnn64_9.dll: dir \"{root}\" "
                     f"lists it; newer installers add a further x64 folder, bin\\{folder}\\x64), open a new terminal "
                     "and start the program again; Python 3.8+ loads DLLs without PATH for its own extensions, so a "
                     f"script can call os.add_dll_directory(r\"{root}\\{folder}\") before importing the library; or "
                     f"copy the DLLs from {root}\\{folder} into the CUDA Toolkit's bin folder",
                     [ctx.line_fact(failing[0])], failing[:1])
    # cuDNN 8: its loader (cudnn64_8 / cudnn_ops_infer64_8, already loaded) says it cannot load a further part: that
    # part's dependency, zlibwapi.dll, is what is missing (8.3 on)
    if minor is not None and minor < 3:
        return None   # before 8.3 cuDNN needed no zlib
    loaded_by_cudnn = part.startswith(("cnn", "adv"))
    if not (loaded_by_cudnn or _IS_THERE.search(text)):
        return None
    return _zlib(ctx, failing[:1], m.group(1))


def _zlib(ctx: Context, lines: list, dll: Optional[str]) -> Diagnosis:
    named = f"{dll}.dll is found, but it" if dll else "cuDNN"
    return _make("rocm-libs-missing", "cuDNN 8 lacks zlibwapi.dll",
                 f"{named} depends on zlibwapi.dll (cuDNN 8.3 and later on Windows), which Windows does not ship: "
                 "error 126 is a dependency of the DLL not found, not the DLL itself",
                 "install zlib as NVIDIA's cuDNN 8 install guide says: take zlibwapi.dll from the zlib DLL build "
                 "(zlib123dllx64.zip, its dll_x64 folder) and put it in a folder on PATH, such as the CUDA Toolkit's "
                 "bin (C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\vX.Y\\bin) beside the cuDNN DLLs, or in "
                 "C:\\Windows\\System32; then open a new terminal and start the program again",
                 [ctx.line_fact(lines[0])], lines)
