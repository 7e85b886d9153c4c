"""rocBLAS reading its Tensile library from the old per-component folder: before ROCm 5.2 each component had its own
tree (/opt/rocm/rocblas/lib); since then the libraries live in /opt/rocm/lib and the old folders are compatibility
links, later removed. rocBLAS finds TensileLibrary*.dat relative to the librocblas.so it was loaded from, so a loader
path that still names the old folder sends it where the file is not. That is a path to correct, not an arch to add."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _make, rule

# "Cannot read /opt/rocm/rocblas/lib/rocblas/library/TensileLibrary.dat: No such file or directory"
_OLD_FOLDER = re.compile(r"(?i)Cannot read (\S*?)/rocblas/lib/\S*TensileLibrary\S*\.dat\b.{0,10}No such file")


@rule("rocm-libs-missing")
def tensile_in_the_old_folder(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: rocBLAS's unreadable Tensile file under the pre-5.2 component folder <root>/rocblas/lib."""
    hits = [(e, _OLD_FOLDER.search(e.line)) for e in ctx.errors]
    hits = [(e, m) for e, m in hits if m]
    if not hits:
        return None
    error, m = hits[0]
    root = m.group(1) or "/opt/rocm"
    return _first(_make(
        "rocm-libs-missing", f"rocBLAS looks for its Tensile library in the old {root}/rocblas/lib folder",
        f"rocBLAS finds TensileLibrary.dat beside the librocblas.so it was loaded from; it was loaded through the "
        f"pre-ROCm-5.2 folder {root}/rocblas/lib (a stale LD_LIBRARY_PATH entry or link), where the Tensile files "
        f"are not; since ROCm 5.2 they are in {root}/lib/rocblas/library",
        f"export ROCBLAS_TENSILE_LIBPATH={root}/lib/rocblas/library (rocBLAS's own variable for the Tensile folder), "
        f"and drop {root}/rocblas/lib from LD_LIBRARY_PATH so the current {root}/lib/librocblas.so loads",
        [ctx.line_fact(error)], [error]))
