"""CuPy installed twice: CuPy ships one package per CUDA release (cupy-cuda101, cupy-cuda11x, cupy-cuda12x) plus the
source package `cupy`, and all of them install the same `cupy` module; two in one environment overwrite each other's
files, leaving a module with parts missing ("module 'cupy' has no attribute 'random'", "cannot import name ... from
'cupy'"). CuPy itself warns "CuPy may not function correctly because multiple CuPy packages are installed". The fix
removes every CuPy package and installs the one for the machine's CUDA.

Facts: CuPy's installation docs ("Uninstalling CuPy": pip uninstall every cupy / cupy-cudaXXX package; do not install
multiple CuPy packages in one environment) and the warning in cupy/_environment.py; cupy#3541's maintainer (a
third-party Windows `cupy` build under cupy-cuda101: pip list, uninstall all, reinstall one).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_BROKEN = re.compile(r"(?i)module 'cupy(?:\.\w+)*' has no attribute '\w+'|cannot import name '\w+' from 'cupy[\w.]*'|"
                     r"multiple CuPy packages are installed")
_PACKAGE = re.compile(r"(?i)\bcupy-cuda(\d{2,3}x?|\d{3})\b")


def _cuda_of(tag: str) -> str:
    """cupy-cuda101 -> CUDA 10.1, cupy-cuda12x -> CUDA 12.x"""
    return f"{tag[:2]}.x" if tag.endswith("x") else f"{tag[:-1]}.{tag[-1]}"


@rule("wheel-platform")
def several_cupy_packages(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _BROKEN)
    if not lines:
        return None
    named = list(dict.fromkeys(m.group(0).lower() for m in _PACKAGE.finditer(_text(ctx))))
    if len(named) == 1:
        package, for_cuda = named[0], f" (CUDA {_cuda_of(named[0][len('cupy-cuda'):])})"
    else:
        # several named (the warning's list, or the user's tries): which one fits is the machine's CUDA, not the order
        among = f"one of {' / '.join(named)}: " if named else ""
        package, for_cuda = (f"{among}the cupy-cudaXXX for the CUDA this machine runs (nvidia-smi; cupy-cuda12x for "
                             "CUDA 12, cupy-cuda11x for 11)"), ""
    return _make("wheel-platform", "more than one CuPy package in this environment",
                 "every CuPy package (cupy, cupy-cudaXXX) installs the same cupy module; with two installed, one "
                 "overwrote part of the other and the module is missing pieces",
                 "pip list | findstr /i cupy (Linux: pip list | grep -i cupy), then pip uninstall each cupy and "
                 "cupy-cudaXXX listed (repeat until none is left; conda list cupy for a conda-installed one), then "
                 f"pip install {package}{for_cuda} only", [ctx.line_fact(lines[0])], lines[:1])
