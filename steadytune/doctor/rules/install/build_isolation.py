"""A CUDA extension built in pip's isolated build environment: torch's check that nvcc's CUDA matches torch's fails
inside /tmp/pip-build-env-*/overlay, so the torch it compares with is the one pip put into that environment from the
project's build requirements, not the user's. Reinstalling the user's torch changes nothing there; the toolkit has to
match that torch's CUDA, or the build has to use the user's torch (--no-build-isolation)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_ISOLATED = re.compile(r"pip-build-env-\w+|/overlay/lib/python")
# torch.utils.cpp_extension's CUDA_MISMATCH_MESSAGE, often wrapped over several lines
_MISMATCH = re.compile(r"(?i)detected CUDA version \((\d+\.\d+)\) mismatches\s+the version that was used to compile\s+"
                       r"PyTorch \((\d+\.\d+)\)")


@rule("abi-mismatch")
def isolated_build_torch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's CUDA-mismatch message and pip's isolated build environment in the traceback."""
    text = _text(ctx)
    if "mismatches" not in text or not _ISOLATED.search(text):
        return None
    m = _MISMATCH.search(re.sub(r"\s+", " ", text))
    if m is None:
        return None
    nvcc, torch_cuda = m.groups()
    lines = _lines_matching(ctx, r"(?i)detected CUDA version|mismatches")[:1]
    return _first(_make(
        "abi-mismatch", f"the isolated build's torch is for CUDA {torch_cuda}, the nvcc found is CUDA {nvcc}",
        f"pip builds the package in an isolated environment (pip-build-env) with the torch its build requirements "
        f"pin, which was built for CUDA {torch_cuda}; torch refuses to compile extensions with the CUDA {nvcc} nvcc on "
        "the path. Reinstalling your own torch does not change the torch inside that environment",
        f"build with a CUDA {torch_cuda} toolkit: export CUDA_HOME=/usr/local/cuda-{torch_cuda} PATH=/usr/local/"
        f"cuda-{torch_cuda}/bin:$PATH before pip install; or build against your own torch: install a torch built for "
        f"CUDA {nvcc} (or the nearest the index has), then pip install --no-build-isolation -e . so the build uses it",
        [ctx.line_fact(lines[0])] if lines else [], lines))
