"""The CUDA Python stack's own way to the driver: numba (and cuML / cuDF, which reach the GPU through numba), CuPy and
PyCUDA load the NVIDIA driver's libcuda themselves, and numba loads the toolkit's libNVVM to compile. It reads a driver
variable that names another library, numba finding no driver or no NVVM, and, under WSL 2, a libcuda that is not WSL's.

Sources: numba's CUDA docs ("Setting CUDA installation path": NUMBA_CUDA_DRIVER names the driver library; the toolkit
is searched in conda's packages, then CUDA_HOME / CUDA_PATH, then the system's /usr/local/cuda); NVIDIA's CUDA on WSL
guide (the Windows driver's libcuda is mounted in /usr/lib/wsl/lib; no Linux display driver may be installed inside
WSL); numba#9032 (a libnvidia-compute package inside WSL shadowing WSL's libcuda); cuml#5624 (NUMBA_CUDA_DRIVER and
LD_LIBRARY_PATH pointed at /usr/lib/wsl/lib)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.device_files import _WSL_SAID
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text


# the programs of the CUDA Python stack, by their modules and messages (not by prose alone)
_STACK = re.compile(r"(?i)\bnumba(?:pro)?\b|\bcupy\b|\bcuml\b|\bcudf\b|\brapids\b|\bpycuda\b|\bcuspatial\b|\bcugraph\b|"
                    r"CudaAPIError|CudaSupportError|NvvmSupportError|CudaDriverError")
_DRIVER_VARIABLE = re.compile(r"\b(NUMBA(?:PRO)?_CUDA_DRIVER)\s*=\s*[\"']?([^\s\"';]+)")
# numba's words for a library loaded as the driver that has no driver API in it (the runtime, NVVM, a stub)
_MISSING_FUNCTION = re.compile(r"(?i)driver missing function:? ?(cu\w+)")
_NO_DRIVER = re.compile(r"(?i)CUDA driver library cannot be found|Error at driver init:?\s*$|Error at driver init:? "
                        r"(?:\[\d+\] )?Call to cuInit|Call to cuInit results in (?:CUDA_ERROR_NO_DEVICE|"
                        r"CUDA_ERROR_UNKNOWN|UNKNOWN_CUDA_ERROR|CUDA_ERROR_NOT_INITIALIZED|CUDA_ERROR_OPERATING_SYSTEM)|"
                        r"cuInit\w*\W{1,4}(?:failed|returned)\W{0,3}(?:100|999|3|304)\b")
_NO_NVVM = re.compile(r"(?i)libNVVM cannot be found|NvvmSupportError|\bNVVM (?:was )?not found|library nvvm not found|"
                      r"libnvvm\.so\S*: cannot open|nvvm64_\d+_\d+\.dll.{0,40}(?:not found|could not be found|cannot)")
# a libcuda shown at a path of a Linux driver package (ldconfig -p, ctypes, ldd): under WSL it shadows WSL's
_NATIVE_LIBCUDA = re.compile(r"(/(?:usr/)?lib(?:64)?(?:/(?:x86_64|aarch64)-linux-gnu)?/libcuda\.so(?:\.[\d.]+)?)")
_COMPUTE_PACKAGE = re.compile(r"\blibnvidia-compute-(\d{3})\b|\bnvidia-(?:driver|utils)-(\d{3})\b")
# what a library named in a driver variable is, by its file name
_NOT_THE_DRIVER = ((r"libcudart|cudart64", "the CUDA runtime (libcudart)"), (r"libnvvm|nvvm64", "NVVM, the toolkit's "
                   r"compiler library"), (r"/stubs?/", "the toolkit's link-time stub of libcuda, which has no driver "
                   r"behind it"), (r"libnvrtc|nvrtc64", "NVRTC, the toolkit's run-time compiler"),
                   (r"libcublas|cublas64", "cuBLAS"))


def _under_wsl(ctx: Context) -> bool:
    return ctx.sheet.has("platform", "wsl") or bool(_WSL_SAID.search(_text(ctx)))


def _libcuda_here(ctx: Context) -> str:
    """Where this machine's driver library lives: WSL's mount, Windows' System32, the Debian / Ubuntu multiarch
    folder (aarch64 or x86_64), else the lib64 of Red Hat's and SUSE's packages."""
    text = _text(ctx)
    if _under_wsl(ctx):
        return "/usr/lib/wsl/lib/libcuda.so.1"
    if ctx.sheet.is_windows:
        return r"C:\Windows\System32\nvcuda.dll"
    if ctx.sheet.has("cpu_arch", "aarch64"):
        return "/usr/lib/aarch64-linux-gnu/libcuda.so.1"
    if re.search(r"(?i)\b(?:rhel|red hat|centos|rocky|alma|fedora|suse|sles)\b|/usr/lib64/", text):
        return "/usr/lib64/libcuda.so.1"
    return "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


@rule("rocm-libs-missing")
def driver_variable_not_libcuda(ctx: Context) -> Optional[Diagnosis]:
    """numba's driver variable naming a library that is not the driver (the runtime, NVVM, the stub), or numba finding
    the driver API missing from the library it loaded: it must name libcuda (nvcuda.dll on Windows), or be unset."""
    set_to = [m for m in _DRIVER_VARIABLE.finditer(_text(ctx))]
    wrong = next(((m, what) for m in set_to for pattern, what in _NOT_THE_DRIVER if re.search(pattern, m.group(2))),
                 None)
    missing = _lines_matching(ctx, _MISSING_FUNCTION)
    if wrong is None and not missing:
        return None
    target = _libcuda_here(ctx)
    variable = (wrong[0] if wrong else set_to[-1] if set_to else None)
    name = variable.group(1) if variable else "NUMBA_CUDA_DRIVER"
    named = f"{name}={variable.group(2)} names " + (wrong[1] if wrong else "a library") if variable else \
        "the library numba loaded as the driver is"
    function = _MISSING_FUNCTION.search(missing[0].line).group(1) if missing else "cuInit"
    stub = wrong is not None and "stub" in wrong[1]
    return _make("rocm-libs-missing", "numba is pointed at a library that is not the CUDA driver",
                 f"{named}, not the NVIDIA driver's libcuda; numba loads the driver API ({function} and the rest) from "
                 "the library its driver variable names, and "
                 + ("the stub only answers that no driver is there" if stub else f"that one has no {function}"),
                 f"point {name} at the driver library itself: export {name}={target} (ldconfig -p | grep libcuda "
                 "lists it; libcuda.so comes with the NVIDIA driver, never with the toolkit), or unset it, so numba "
                 "finds libcuda by itself; the toolkit's runtime and NVVM are found through CUDA_HOME, not this variable",
                 [], missing or _lines_matching(ctx, re.escape(variable.group(0))) if variable else missing)


@rule("rocm-libs-missing")
def numba_finds_no_driver(ctx: Context) -> Optional[Diagnosis]:
    """numba (or a RAPIDS library through it) finding no libcuda outside WSL: no NVIDIA driver on this machine or in
    this container, or one the loader does not search."""
    said = _lines_matching(ctx, r"(?i)CUDA driver library cannot be found")
    if not said or _under_wsl(ctx) or _DRIVER_VARIABLE.search(_text(ctx)) and driver_variable_not_libcuda(ctx):
        return None
    target = _libcuda_here(ctx)
    if ctx.sheet.is_windows:
        fix = ("install (or reinstall) the NVIDIA driver for the GPU: it puts nvcuda.dll in C:\\Windows\\System32, "
               "which numba loads; nvidia-smi must list the GPU; a conda cudatoolkit brings no driver")
    else:
        fix = ("nvidia-smi must list the GPU: install the NVIDIA driver if it does not (the toolkit and conda's "
               "cudatoolkit bring no libcuda); in a container start it with --gpus all (NVIDIA Container Toolkit); "
               "where the driver is installed but outside the loader's search (ldconfig -p | grep libcuda; find / -name "
               f"'libcuda.so*'), tell numba: export NUMBA_CUDA_DRIVER={target} (that path, as found)")
    return _make("rocm-libs-missing", "numba finds no CUDA driver library",
                 "numba loads the NVIDIA driver's libcuda (nvcuda.dll on Windows) before anything else; none was found "
                 "where the loader looks", fix, [], said)


@rule("rocm-libs-missing")
def numba_finds_no_nvvm(ctx: Context) -> Optional[Diagnosis]:
    """numba compiling a kernel without the toolkit's libNVVM: it comes with the CUDA toolkit (conda's packages, pip's
    nvidia-cuda-nvcc wheel, or a system toolkit that CUDA_HOME names), never with the driver."""
    said = _lines_matching(ctx, _NO_NVVM)
    if not said or not re.search(r"(?i)numba|NvvmSupportError|libNVVM cannot be found", _text(ctx)):
        return None
    windows = ctx.sheet.is_windows
    folder = (r"%CUDA_PATH%\nvvm\bin\nvvm64_*.dll" if windows else "$CUDA_HOME/nvvm/lib64/libnvvm.so")
    home = (r"set CUDA_HOME=C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.x" if windows else
            "export CUDA_HOME=/usr/local/cuda")
    return _make("rocm-libs-missing", "numba finds no libNVVM",
                 "numba compiles kernels with NVVM, the CUDA toolkit's compiler library (libnvvm), which it looks for "
                 "in conda's CUDA packages, then under CUDA_HOME (CUDA_PATH) and /usr/local/cuda; none is there (the "
                 "driver alone brings no NVVM)",
                 "install the toolkit's NVVM where numba looks: conda install -c conda-forge cuda-nvcc cuda-nvrtc "
                 "\"cuda-version=12\" (CUDA 11: conda install cudatoolkit=11.8), or pip install \"numba-cuda[cu12]\"; "
                 f"with a system CUDA toolkit, point numba at it: {home} (it must hold {folder}); numba -s shows in "
                 "its CUDA section what it found", [], said)


def _shadowing_libcuda(ctx: Context) -> Optional[str]:
    """A libcuda at a Linux driver package's path, or the package itself, named in a WSL paste."""
    for line in ctx.sheet.lines:
        m = _NATIVE_LIBCUDA.search(line)
        if m and "/wsl/" not in line:
            return m.group(1)
    return None


@rule("wsl")
def wsl_cuda_python(ctx: Context) -> Optional[Diagnosis]:
    """numba / CuPy / cuML under WSL 2 failing to start CUDA: a Linux driver's libcuda (libnvidia-compute) shadowing
    WSL's, or WSL's folder not where numba looks."""
    text = _text(ctx)
    if not _under_wsl(ctx) or not _STACK.search(text):
        return None
    failing = _lines_matching(ctx, _NO_DRIVER) + _lines_matching(ctx, r"(?i)cuda\.is_available\(\)\W{0,6}False|"
                                                                       r"^\W*False\W*$")
    native = _shadowing_libcuda(ctx)
    package = _COMPUTE_PACKAGE.search(text)
    if not failing and not (native and package):
        return None
    branch = next((g for g in package.groups() if g), None) if package else None
    numba = re.search(r"(?i)numba|cuml|cudf|rapids|CudaAPIError|CudaSupportError", text)
    point = ("; point numba at WSL's driver: export NUMBA_CUDA_DRIVER=/usr/lib/wsl/lib/libcuda.so.1" if numba else "")
    if native or package:
        found = native or f"libnvidia-compute-{branch}"
        return _first(_make(
            "wsl", "a Linux NVIDIA driver's libcuda inside WSL shadows WSL's",
            f"under WSL 2 CUDA must go through the Windows driver's libcuda, mounted in /usr/lib/wsl/lib; here "
            f"{found} from a Linux driver package (libnvidia-compute-<branch>) is loaded first, and it finds no GPU "
            "(CUDA_ERROR_NO_DEVICE); torch may still work because its wheels reach the driver differently",
            f"remove the Linux driver's libraries from the distribution: dpkg -S {native or 'libcuda.so'} names the "
            f"package, then sudo apt remove --purge libnvidia-compute-{branch or '<branch>'} (and any "
            "nvidia-driver-* / nvidia-utils-* beside it), sudo ldconfig; ldconfig -p | grep libcuda must then list "
            f"only /usr/lib/wsl/lib{point}; keep only the Windows NVIDIA driver", [], failing or
            _lines_matching(ctx, re.escape(found))))
    return _first(_make(
        "wsl", "CUDA under WSL 2: numba does not load WSL's libcuda" if numba else
        "CUDA under WSL 2: the program does not load WSL's libcuda",
        "under WSL 2 the NVIDIA driver is the Windows one, whose libcuda is mounted in /usr/lib/wsl/lib; "
        + ("numba looks for libcuda on the loader's ordinary path and " if numba else "the program ")
        + "does not find (or does not load first) WSL's copy, so cuInit finds no device",
        "export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH" + (" and NUMBA_CUDA_DRIVER=/usr/lib/wsl/lib/"
                                                                       "libcuda.so.1" if numba else "")
        + " (in ~/.bashrc, so every shell and notebook kernel gets them); if dpkg -l | grep libnvidia-compute lists a "
        "Linux driver package, remove it (sudo apt remove --purge 'libnvidia-compute-*'), it shadows WSL's libcuda; "
        "keep only the Windows NVIDIA driver", [], failing))
