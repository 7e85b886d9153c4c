"""bitsandbytes' native library for this CUDA or ROCm: the loader picks a file named after the CUDA (or ROCm) release
it sees (libbitsandbytes_cuda124.dll, libbitsandbytes_rocm712.so), and each bitsandbytes release ships files for the
releases it was built for. A file that is not there is a row of the release table below (the first bitsandbytes
release that shipped it), a CUDA below the oldest one bitsandbytes builds for, or a ROCm tag the loader derived wrongly.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _release_numbers, _text, \
    on_windows, rule


# The first bitsandbytes release with a prebuilt binary for a CUDA release (by OS; None: every OS it built for then).
# Sources: the 0.35.0 release notes ("CUDA 11.8 support added and binaries added to the PyPI release"), the 0.43.1
# release notes (CUDA 12.4 in the Linux build, PR 1171), PR 1284 released in 0.43.2 (Windows CUDA 12.4 and 12.5
# builds), PyPI's 0.45.3 files (the first with CUDA 12.8, named in stable-diffusion-webui-forge PR 2712), PR 1431
# (CUDA 12.6 builds, first tagged in 0.45.0), PR 1689 (CUDA 12.9 builds, first tagged in 0.47.0), PR 1761 (CUDA 13.0,
# first tagged in 0.48.0).
_FIRST_WITH = {("118", None): "0.35.0", ("124", "linux"): "0.43.1", ("124", "windows"): "0.43.2",
               ("125", "windows"): "0.43.2", ("126", None): "0.45.0", ("128", None): "0.45.3",
               ("129", None): "0.47.0", ("130", None): "0.48.0"}

# the oldest CUDA bitsandbytes builds and supports: PR 1605 stopped building for CUDA toolkits before 11.8 (aligned
# with torch 2.1's minimum); the maintainers close requests for older ones with "the lowest CUDA version we are
# supporting is 11.8". The Makefile build went at the same time as the move to CMake (0.43.0).
_OLDEST_CUDA = (11, 8)

# the loader names the file it wants: "Configured CUDA binary not found at .../libbitsandbytes_cuda131.so",
# "Could not find the bitsandbytes CUDA binary at WindowsPath('.../libbitsandbytes_cuda124.dll')", "Cannot load
# libbitsandbytes_cuda114_nocublaslt.so", or a user says it: "I don't see a file for libbitsandbytes_cuda118.so"
_LIBRARY = re.compile(r"libbitsandbytes_cuda(\d{2})(\d)\w{0,20}\.(?:so|dll)")
_SAID_BEFORE = re.compile(r"(?i)(?:not found|cannot load|could not (?:load|find)|failed to load|missing|there is no|"
                          r"(?:don'?t|do not|can'?t|cannot|couldn'?t) (?:see|find))\b")
_SAID_AFTER = re.compile(r"(?i)not found|cannot be loaded|is missing")


def _wanted(line: str) -> Optional[re.Match]:
    """The libbitsandbytes_cudaNNN file a line says is missing: the file name, with the words that say so within 240
    characters before it (the loader's message, then the full site-packages path of a venv) or 60 after (anchored on
    the file name, so a long line costs one pass)."""
    for m in _LIBRARY.finditer(line):
        if _SAID_BEFORE.search(line, max(0, m.start() - 240), m.start()) or \
                _SAID_AFTER.search(line, m.end(), m.end() + 60):
            return m
    return None


# bitsandbytes before 0.41.0 found CUDA by the libcudart files on the library path ("CUDA SETUP: Detected CUDA version
# 122"); from 0.41.0 it follows torch's CUDA and takes BNB_CUDA_VERSION (the 0.41.0 release notes)
_OLD_LOADER = re.compile(r"CUDA SETUP: |CUDA_SETUP: |Required library version not found")
_INSTALLED = re.compile(r"(?i)\bbitsandbytes(?:-|==|\s{1,3}|\s{0,3}version\s{0,3}:?\s{0,3})v?(\d+\.\d+\.\d+)")
# a CUDA release said with bitsandbytes around: "CUDA 11.6", "cuda12.4", "make CUDA_VERSION=116"
_CUDA_SAID = re.compile(r"(?i)\bCUDA[_ ]?VERSION\s{0,3}=\s{0,3}(1\d)(\d)\b|\bCUDA\s{0,3}[-_ ]?(1\d)\.(\d)\b")


def _os_of(ctx: Context, line: str) -> str:
    return "windows" if ".dll" in line or "WindowsPath" in line or on_windows(ctx, _text(ctx)) else "linux"


def _first_release_with(wanted: str, system: str) -> Optional[str]:
    return _FIRST_WITH.get((wanted, system)) or _FIRST_WITH.get((wanted, None))


@rule("wheel-platform")
def bitsandbytes_binary_for_another_cuda(ctx: Context) -> Optional[Diagnosis]:
    """bitsandbytes picks its native library by the CUDA version it sees (cuda131 for CUDA 13.1) and ships one per CUDA
    release it was built for: a CUDA newer than the release names a file that is not there (the release table says
    which bitsandbytes first shipped it), a CUDA older than 11.8 is one bitsandbytes no longer builds for, and the
    loader before 0.41.0 guessed the CUDA from the libcudart files on the path."""
    text = _text(ctx)
    if "bitsandbytes" not in text.lower():
        return None
    lines = [line for line in _lines_matching(ctx, _LIBRARY.pattern) if _wanted(line.line)] \
        if "libbitsandbytes_cuda" in text else []
    said = None if lines else _lines_matching(ctx, _CUDA_SAID.pattern)
    if lines:
        major, minor = _wanted(lines[0].line).groups()
    elif said:   # no file named: the CUDA the user says, where it is one bitsandbytes no longer builds for
        m = _CUDA_SAID.search(said[0].line)
        major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if (int(major), int(minor)) >= _OLDEST_CUDA:
            return None
        lines = said
    else:
        return None
    wanted, cuda = f"{major}{minor}", f"{major}.{minor}"
    evidence = [ctx.line_fact(lines[0])]
    # a file that is there but does not load ("Could not load libbitsandbytes_cuda117.so although it exists") is this
    # release's own binary: the loader's reading below, not the oldest CUDA bitsandbytes builds for
    there = re.search(r"(?i)although it exists|could not load|cannot load|failed to load|cannot be loaded",
                      lines[0].line)
    if (int(major), int(minor)) < _OLDEST_CUDA and not there:
        return _make("wheel-platform", f"bitsandbytes does not build for CUDA {cuda}",
                     f"bitsandbytes builds and supports CUDA 11.8 and newer (its wheels carry no CUDA {cuda} binary, "
                     "and the Makefile build that took CUDA_VERSION is gone: it builds with CMake now)",
                     "upgrade the CUDA toolkit and torch to CUDA 11.8 or newer (pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu118 or a newer cuXXX) and pip install -U bitsandbytes; "
                     f"or compile it yourself for CUDA {cuda} with CMake (cmake -DCOMPUTE_BACKEND=cuda -S . && make && "
                     "pip install .), which is no longer supported", evidence, lines[:1])
    system = _os_of(ctx, lines[0].line)
    first = _first_release_with(wanted, system)
    installed = _INSTALLED.search(text)
    behind = first and (installed is None or _release_numbers(installed.group(1)) < _release_numbers(first))
    same_major = f"{major}.0"
    if behind:
        upgrade = (f"pip install -U \"bitsandbytes>={first}\" ({first} is the first release with a "
                   f"{'Windows ' if (wanted, system) in _FIRST_WITH else ''}CUDA {cuda} binary, "
                   f"libbitsandbytes_cuda{wanted})")
    else:
        upgrade = f"pip install -U bitsandbytes (a release built for CUDA {cuda})"
    if _OLD_LOADER.search(text):
        other = (f"or put the runtime of a CUDA it ships first on the library path (CUDA {same_major}: "
                 f"LD_LIBRARY_PATH=/usr/local/cuda-{same_major}/lib64), since this release's loader picks the binary "
                 "from the libcudart it finds" if minor != "0" else
                 "or install a CUDA runtime this release ships a binary for")
        pick = f" (after the upgrade, export BNB_CUDA_VERSION={major}0 picks its CUDA {same_major} binary)" \
            if minor != "0" else ""
        fix = f"{upgrade}; 0.41.0 and newer follow torch's CUDA and take BNB_CUDA_VERSION{pick}; {other}"
    else:
        pick = (f"; or export BNB_CUDA_VERSION={major}0 (its CUDA {same_major} binary, same major: ls "
                "site-packages/bitsandbytes/libbitsandbytes_cuda* lists what it ships)" if minor != "0" else "")
        fix = f"{upgrade}{pick}; python -m bitsandbytes shows what it loads"
    return _make("wheel-platform", f"bitsandbytes has no loadable binary for CUDA {cuda}",
                 f"bitsandbytes loads libbitsandbytes_cuda{wanted} (named after the CUDA it sees), a binary this "
                 f"bitsandbytes release{' (' + installed.group(1) + ')' if installed else ''} does not ship or cannot "
                 "load", fix, evidence, lines[:1])


# "libbitsandbytes_rocm82.so", "Configured ROCm binary not found at ...\\libbitsandbytes_rocm713.dll"
_ROCM_WANTED = re.compile(r"libbitsandbytes_rocm(\d{2,4})\.(?:so|dll)")
# the ROCm torch was built for: "2.12.0a0+rocm7.12.0a20260304", "torch.version.hip: 7.12", "ROCm 7.12"
_TORCH_ROCM = re.compile(r"(?i)\+rocm(\d+)\.(\d+)|torch\.version\.hip\W{1,6}(\d+)\.(\d+)")


@rule("wheel-platform")
def bitsandbytes_rocm_library_tag(ctx: Context) -> Optional[Diagnosis]:
    """bitsandbytes on ROCm loads libbitsandbytes_rocm<major><minor> after the ROCm of torch.version.hip. Releases up
    to 0.49.2 made the tag as major*10+minor, so ROCm 7.12 looks for rocm82 (PR 1889 joins the digits: rocm712); a
    tag that is right but not shipped is a build for another ROCm, which BNB_ROCM_VERSION (PR 1878) overrides."""
    lines = _lines_matching(ctx, _ROCM_WANTED.pattern) if "libbitsandbytes_rocm" in _text(ctx) else []
    torch_rocm = _TORCH_ROCM.search(_text(ctx)) if lines else None
    if not torch_rocm:
        return None
    major, minor = (g for g in torch_rocm.groups() if g is not None)
    right = f"{major}{minor}"
    asked = [m.group(1) for line in lines for m in _ROCM_WANTED.finditer(line.line)]
    naive = str(int(major) * 10 + int(minor))
    if naive != right and naive in asked:
        return _make("wheel-platform", f"bitsandbytes derives the wrong library tag for ROCm {major}.{minor}",
                     f"torch is built for ROCm {major}.{minor}, and bitsandbytes (0.49.2 and older) makes the library "
                     f"tag as major*10+minor, so it looks for libbitsandbytes_rocm{naive} instead of "
                     f"libbitsandbytes_rocm{right}",
                     f"upgrade bitsandbytes to a release with the fix of PR 1889 (major and minor joined: rocm{right}) "
                     "or build it from main for this ROCm (cmake -DCOMPUTE_BACKEND=hip -S . && make && pip install .), "
                     f"so it builds and loads libbitsandbytes_rocm{right}; a release that has BNB_ROCM_VERSION (PR "
                     f"1878) can be pointed at a library it ships: export BNB_ROCM_VERSION=<its tag>",
                     [ctx.line_fact(lines[0])], lines[:1])
    if right in asked:
        return _make("wheel-platform", f"bitsandbytes has no library for ROCm {major}.{minor}",
                     f"bitsandbytes looks for libbitsandbytes_rocm{right} (torch's ROCm {major}.{minor}), and the "
                     "installed release ships no library for that ROCm",
                     f"build bitsandbytes for ROCm {major}.{minor} (cmake -DCOMPUTE_BACKEND=hip -S . && make && pip "
                     "install .), or point it at a library it ships: export BNB_ROCM_VERSION=<the tag of "
                     "site-packages/bitsandbytes/libbitsandbytes_rocm*> (bitsandbytes with PR 1878)",
                     [ctx.line_fact(lines[0])], lines[:1])
    return None


# The import of bitsandbytes itself in a traceback ("File "...\site-packages\bitsandbytes\__init__.py", line 5"),
# or the user asking whether it runs on Windows at all
_BNB_IMPORTED = re.compile(r"(?i)[/\\]bitsandbytes[/\\]__init__\.py|^\s*import bitsandbytes\b")
# (its name as people write it: bitsandbytes, bits_and_bytes, bits-and-bytes)
_BNB_NAME = r"\bbits?[-_ ]?and[-_ ]?bytes\b"
_WINDOWS_ASKED = re.compile(r"(?i)" + _BNB_NAME + r".{0,60}\bwindows\b|\bwindows\b.{0,60}" + _BNB_NAME)
# (bitsandbytes-windows: the community build on PyPI of the releases before it, which projects pinned on Windows:
# PromtEngineer/localGPT#265's requirements, huggingface/peft#431's answer)
# releases before 0.43.0 published Linux wheels only (0.43.0 release notes: Windows officially supported; tool_fixes'
# bitsandbytes row names the first Windows wheels)
_FIRST_WINDOWS = (0, 43, 0)


@rule("wheel-platform")
def bitsandbytes_release_before_windows(ctx: Context) -> Optional[Diagnosis]:
    """bitsandbytes failing at its own import on Windows, with no error line of a known family to say more: releases
    before 0.43 carried no Windows binary at all, so an older install (or one a program pins) breaks on import there.
    A release shown as 0.43 or newer is a different problem."""
    text = _text(ctx)
    if not re.search(r"(?i)" + _BNB_NAME, text) or not on_windows(ctx, text) or any(e.family for e in ctx.errors):
        return None
    lines = _lines_matching(ctx, _BNB_IMPORTED) or _lines_matching(ctx, _WINDOWS_ASKED)
    installed = _INSTALLED.search(text)
    if not lines or (installed and _release_numbers(installed.group(1)) >= _FIRST_WINDOWS):
        return None
    return _make("wheel-platform", "this bitsandbytes release has no Windows build",
                 "bitsandbytes fails at its own import on Windows; releases before 0.43.0 published Linux binaries only"
                 + (f" (this one is {installed.group(1)})" if installed else ""),
                 "pip uninstall -y bitsandbytes; pip install -U \"bitsandbytes>=0.43.0\" (the first release with "
                 "Windows support; its wheels carry the CUDA binaries); python -m bitsandbytes then shows what it "
                 "loads; where a program pins a release before 0.43, the community Windows build of those releases "
                 "stands in: pip uninstall -y bitsandbytes; pip install bitsandbytes-windows",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)


# the loader of releases up to 0.43.0 (bitsandbytes/cuda_setup/main.py, removed in 0.43.1) searching the library
# path for libcudart: "UserWarning: /usr/lib64-nvidia did not contain ['libcudart.so', ...] as expected!"
_OLD_SETUP_PATH = re.compile(r"bitsandbytes[/\\]cuda_setup[/\\]")
_CUDART_SEARCH = re.compile(r"(?i)did not contain \[?'?libcudart|CUDA SETUP: .{0,80}\b(?:not|failed|unable|could)\b|"
                            r"CUDA Setup failed|libcudart\.so.{0,40}not found")


@rule("wheel-platform")
def bitsandbytes_old_cuda_setup(ctx: Context) -> Optional[Diagnosis]:
    """A bitsandbytes of the cuda_setup era (up to 0.43.0) guessing the CUDA runtime from the libcudart files on the
    library path, with no error of a known family beside it: the release predates the CUDA runtime of the machine (a
    notebook image's CUDA 12), and releases from 0.41.0 follow torch's own CUDA instead (their release notes)."""
    text = _text(ctx)
    if "cuda_setup" not in text or any(e.family for e in ctx.errors) or not _OLD_SETUP_PATH.search(text):
        return None
    lines = _lines_matching(ctx, _CUDART_SEARCH)
    if not lines:
        return None
    return _make("wheel-platform", "an old bitsandbytes searches the library path for the CUDA runtime",
                 "this bitsandbytes is of the cuda_setup era (0.43.0 or older): it guesses the CUDA runtime from the "
                 "libcudart files it finds on the library path and ships binaries for the CUDA releases of its time, "
                 "so on a newer CUDA runtime it finds no binary to load",
                 "pip install -U bitsandbytes (a current release follows torch's CUDA and carries binaries for it); "
                 "then python -m bitsandbytes must report the CUDA binary it loads", [ctx.line_fact(lines[0])],
                 lines[:1], confirmed=False)
