"""Transformer Engine built from source without finding cuDNN: its build (setup.py, CMake) looks for cuDNN's headers and
libraries under CUDNN_PATH (else CUDA's own folders), so a cuDNN installed by pip (nvidia-cudnn-cu12, in
site-packages/nvidia/cudnn) or anywhere outside the toolkit is not seen, or an older one in the toolkit is taken
instead; a build/ folder left by an earlier attempt keeps the old paths cached. Its fp8 attention needs cuDNN 9, so
people rebuild against a new cuDNN and meet this.

Sources: Transformer Engine's installation page (environment variables of a source build: CUDA_PATH, CUDNN_PATH "path to
cuDNN installation", NVTE_FRAMEWORK, MAX_JOBS); NVIDIA/TransformerEngine#930 (a maintainer: remove the old build/ folder
and run CUDA_HOME=... CUDNN_PATH=... pip -v install .; the reporter confirmed CUDNN_PATH fixed it)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_TE = re.compile(r"(?i)transformer[-_ ]?engine|\bNVTE_\w+|\bte\.pytorch\b")
# a build from source: said, or the build's own commands and failures
_SOURCE_BUILD = re.compile(r"(?i)from source|\bpip3? (?:-v )?install (?:-v )?(?:--no-build-isolation )?\.(?:\s|$)|"
                           r"git\+https://github\.com/NVIDIA/TransformerEngine|setup\.py (?:install|build|develop)|"
                           r"Building wheel for transformer[-_]engine|CMake Error|Failed to build transformer")
_CUDNN = re.compile(r"(?i)cu ?dnn")
_TORCH_CUDA = re.compile(r"\+cu(\d{2})(\d)\b")


@rule("rocm-libs-missing")
def transformer_engine_build_without_cudnn(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Transformer Engine built from source, with cuDNN named (a version it needs, a header or library not
    found)."""
    text = _text(ctx)
    if not _TE.search(text) or not _SOURCE_BUILD.search(text):
        return None
    lines = _lines_matching(ctx, _CUDNN)
    if not lines:
        return None
    torch_cuda = _TORCH_CUDA.search(text)
    cuda = f"{torch_cuda.group(1)}.{torch_cuda.group(2)}" if torch_cuda else "<torch.version.cuda>"
    return _make("rocm-libs-missing", "Transformer Engine's source build does not find the cuDNN you installed",
                 "Transformer Engine's build takes cuDNN from CUDNN_PATH, else from the CUDA toolkit's folders: a cuDNN "
                 "installed elsewhere (pip's nvidia-cudnn-cu12, a tarball) is not seen, or an older one is taken, and "
                 "a build/ folder from an earlier attempt keeps the old paths",
                 "remove the old build/ folder in the source tree, then build with both paths given: "
                 f"CUDA_HOME=/usr/local/cuda-{cuda} CUDNN_PATH=<cuDNN's root: the folder with include/cudnn.h and lib/, "
                 "for pip's cuDNN $(python -c 'import os, nvidia.cudnn; print(os.path.dirname(nvidia.cudnn.__file__))')"
                 "> pip -v install . ; check the cuDNN it found in the build log (cudnn_version.h of that folder)",
                 [], lines[:1])
