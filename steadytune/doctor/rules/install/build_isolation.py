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


# torch.utils.cpp_extension sets CUDA_HOME only under a torch compiled with CUDA (CUDA_HOME = _find_cuda_home() if
# torch.cuda._is_compiled() else None), so "CUDA_HOME environment variable is not set" while the user's CUDA_HOME (or
# CUDA_PATH, or a working nvcc) is there is the build's torch being a CPU one: pip's isolated build environment installs
# the torch of the project's build requirements from PyPI, which on Windows (and for pins like torch+cpu) is the CPU build
_NOT_SET = re.compile(r"(?i)CUDA_HOME environment variable is not set")
_SET_SAID = re.compile(r"(?i)\b(?:regardless|even though|although|even if|despite)\b.{0,60}\bCUDA_(?:HOME|PATH)\b|"
                       r"\bCUDA_(?:HOME|PATH)\b.{0,30}\b(?:is|are|was|were|already|correctly)\s+(?:set|defined|configured|"
                       r"there)\b|\b(?:have|had|did|i've)\s+(?:already\s+)?set\b.{0,30}\bCUDA_(?:HOME|PATH)\b|"
                       r"^\s*CUDA_(?:HOME|PATH)\s*=\s*\S*[\\/]\S*cuda|echo \$(?:env:)?CUDA_HOME\W*\n\s*\S*cuda")
_PIP_BUILD = re.compile(r"(?i)\bpip3? install\b[^\n]*?(?:\s-e\s+\S|\s\.(?:\[\w+\])?(?:\s|$|`)|git\+)|pip-build-env-\w+|"
                        r"Getting requirements to build (?:wheel|editable)")


@rule("torch-build")
def isolated_build_cpu_torch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's "CUDA_HOME environment variable is not set" in a pip build, with the user's CUDA_HOME said
    (or shown) to be set."""
    text = _text(ctx)
    lines = _lines_matching(ctx, _NOT_SET)
    if not lines or "--no-build-isolation" in text or not _PIP_BUILD.search(text) or not _SET_SAID.search(text):
        return None
    return _first(_make(
        "torch-build", "pip's isolated build has a CPU torch, so torch reports no CUDA_HOME",
        "torch's extension builder leaves CUDA_HOME unset under a torch compiled without CUDA, whatever the environment "
        "says; pip builds the package in an isolated environment with the torch its build requirements name, "
        "installed from PyPI (the CPU build on Windows), not your CUDA torch",
        "build against the CUDA torch already installed: pip install --no-build-isolation -e . (first pip install "
        "setuptools wheel ninja in the same environment; python -c \"import torch; print(torch.version.cuda)\" must "
        "print a CUDA version); CUDA_HOME (Windows: CUDA_PATH) then points at the toolkit of that CUDA",
        [ctx.line_fact(lines[0])], lines[:1]))
