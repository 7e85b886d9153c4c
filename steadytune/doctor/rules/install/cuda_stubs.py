"""The CUDA toolkit's stub libcuda.so (lib64/stubs: a file made for linking only, with the driver API's names and
none of its work) loaded at run time in place of the driver's libcuda.so.1, because its folder is on
LD_LIBRARY_PATH (or in ld.so.conf.d). The program then sees an unknown error from cuInit, "CUDA driver is a stub
library", or a missing symbol, and the path of the loaded file says which it is. numba/numba#8985: removing
$CUDA_PATH/lib64/stubs from LD_LIBRARY_PATH fixed numba.cuda. The catalogue's cuda-stub-library entry answers the
driver's own words for it; this reads the path."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


# a loaded libcuda whose path runs through a stubs folder (the toolkit's lib64/stubs, targets/.../lib/stubs)
_STUB_PATH = re.compile(r"((?:/[\w.+-]+)*/stubs)/libcuda\.so(?:\.1)?\b")
# the path on a line that reports a failure (a loader, ctypes, numba), not a listing of files
_FAILING = re.compile(r"(?i)error|undefined symbol|cannot|failed|unknown|not found|AttributeError|OSError|stub library")
# the stubs folder set on the loader's path by the paste itself
_ON_PATH = re.compile(r"LD_LIBRARY_PATH\S*=\S*?((?:/[\w.+-]+)*/stubs)\b")


# folders that hold the driver's libcuda.so.1 (WSL's, the distribution's library folder, the container toolkit's mount)
_DRIVER_FOLDER = re.compile(r"/usr/lib/wsl/lib\b|/System32/lxss/lib\b|/usr/lib/x86_64-linux-gnu\b|/usr/lib64(?![/\w])|"
                            r"/usr/local/nvidia/lib64\b")


@rule("rocm-libs-missing")
def stub_libcuda_loaded(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a failure line naming a libcuda under a stubs folder, or that folder on LD_LIBRARY_PATH beside a
    driver failure."""
    lines = [e for e in _lines_matching(ctx, _STUB_PATH) if _FAILING.search(e.line)]
    text = _text(ctx)
    if lines:
        folder = _STUB_PATH.search(lines[0].line).group(1)
    else:
        set_on_path = _ON_PATH.search(text)
        driver_failing = re.search(r"(?i)cuInit|CUDA_ERROR_\w+|cudaError\w+|UNKNOWN_CUDA_ERROR|no CUDA-capable", text)
        if not set_on_path or not driver_failing:
            return None
        folder = set_on_path.group(1)
        # (round 20, r20a) the loader takes the first folder that has the file: a folder of the driver's own libcuda
        # listed before the stubs (WSL's /usr/lib/wsl/lib or its Windows-side lxss/lib, the distribution's library
        # folder) is found first, and the stub is never loaded (ollama/ollama#684)
        listed = re.search(r"LD_LIBRARY_PATH\S*=[\"']?(\S*?)" + re.escape(folder), text)
        if listed and _DRIVER_FOLDER.search(listed.group(1)):
            return None
        lines = _lines_matching(ctx, _ON_PATH)
    return _first(_make(
        "rocm-libs-missing", "the toolkit's stub libcuda is loaded instead of the driver's",
        f"{folder}/libcuda.so is the CUDA toolkit's stub, made for linking only: it has the driver API's names and "
        "none of its work, and it is found before the driver's libcuda.so.1 because its folder is on the loader's "
        "path, so cuInit fails (an unknown error) and the driver's other symbols are missing",
        f"take {folder} out of LD_LIBRARY_PATH (the shell's profile, the module file or the job script that adds it; "
        "keep the toolkit's lib64 itself) and out of /etc/ld.so.conf.d (then sudo ldconfig); the stubs folder belongs "
        "on LIBRARY_PATH for linking only; python -c \"import ctypes; print(ctypes.CDLL('libcuda.so.1'))\" must then "
        "load the driver's library (ldconfig -p | grep libcuda.so.1)", [], lines[:1]))
