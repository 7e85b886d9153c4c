"""torch 2.4 and later under ZLUDA on Windows: cuBLAS refusing a call (CUBLAS_STATUS_NOT_SUPPORTED) because the newer
torch routes its matmuls (addmm, linear) through cuBLASLt, which ZLUDA on Windows cannot provide (there is no hipBLASLt
build for Windows to translate it to). The DLLs are in place and the GPU is fine: the torch release is what changed.

The two standard ways out, in the order a user should try them: keep the torch and turn its cuBLASLt path for addmm
off (DISABLE_ADDMM_CUDA_LT=1 in the environment the program starts from), or go back to the last torch before the
change (2.3.1, the cu118 build ZLUDA's DLLs replace).

Source: lshqqytiger/ZLUDA#53 (maintainer: "torch>=2.4 is broken. The official release started to require cuBLASLt,
which is unavailable on ZLUDA right now. It is available only on Linux build as we cannot build hipBLASLt on Windows";
the reporter ran torch 2.3.1; closed with "it can be solved by setting DISABLE_ADDMM_CUDA_LT (or using nightly
zluda)"). A torch older than 2.4 with the same status is another cause (a DLL not patched, ZLUDA#104): not read here."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, on_windows, rule

_REFUSED = re.compile(r"(?i)CUBLAS_STATUS_NOT_SUPPORTED|cublasLt\w*\b.{0,60}\b(?:not supported|failed)")
# the torch release as a paste writes it: "torch==2.5.1+cu118", "pytorch 2.6.0", "PyTorch Version: 2.4.1+cu118"
_TORCH = re.compile(r"(?i)\b(?:py)?torch(?:\s+version)?\s*(?:==|=|:|\s)\s*v?(\d+)\.(\d+)(?:\.\d+)?")


@rule("torch-build")
def zluda_torch_needs_cublaslt(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: ZLUDA named, on Windows, cuBLAS refusing a call, and a torch of 2.4 or later in the paste (a cuBLASLt
    call in the refusal counts for one)."""
    text = _text(ctx)
    if "zluda" not in text.lower() or not on_windows(ctx, text):
        return None
    refused = _lines_matching(ctx, _REFUSED)
    if not refused:
        return None
    versions = [(int(m.group(1)), int(m.group(2))) for m in _TORCH.finditer(text)]
    versions += [tuple(int(p) for p in v.split("+")[0].split(".")[:2]) for v in ctx.sheet.values("torch")
                 if re.match(r"\d+\.\d+", v)]
    lt_call = any(re.search(r"(?i)cublasLt", e.line) for e in refused)
    if not (any(v >= (2, 4) for v in versions) or lt_call) or any(v < (2, 4) for v in versions):
        return None
    said = max((v for v in versions), default=None)
    torch = f"torch {said[0]}.{said[1]}" if said else "this torch"
    return _first(_make(
        "torch-build", f"{torch} needs cuBLASLt, which ZLUDA on Windows does not have",
        f"from 2.4 the official torch runs its matmuls (addmm / linear) through cuBLASLt; ZLUDA on Windows has no "
        f"cuBLASLt (there is no hipBLASLt build for Windows), so {torch} gets CUBLAS_STATUS_NOT_SUPPORTED although "
        "ZLUDA's DLLs are in place",
        "turn torch's cuBLASLt path off where the program starts: set DISABLE_ADDMM_CUDA_LT=1 (setx "
        "DISABLE_ADDMM_CUDA_LT 1, or a line `set DISABLE_ADDMM_CUDA_LT=1` in the .bat that starts it), or go back to "
        "the last torch before the change: pip install torch==2.3.1 torchvision==0.18.1 --index-url "
        "https://download.pytorch.org/whl/cu118 and patch its DLLs with ZLUDA's again (or use a nightly ZLUDA "
        "that has cuBLASLt)", [ctx.line_fact(refused[0])], refused[:2]))
