"""torch.compile's backend failing on a ROCm torch with no other error named (BackendCompilerFailed: ... raised
TypeError / AttributeError): inductor generates Triton kernels, and a ROCm torch runs only with the Triton release
its index pins (pytorch-triton-rocm). Another package pulling PyPI's triton, or an older pytorch-triton-rocm, over it
breaks inside the compiler with errors that name neither. The tool table's Triton row for AMD has the fix."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor, rule
from steadytune.doctor.rules.install.shared import _table_fix


_BACKEND_FAILED = re.compile(r"BackendCompilerFailed|backend='?inductor'? raised|debug_wrapper raised")
_ROCM_TORCH = re.compile(r"(?i)\+rocm\d|\bROCm\b|\bHIP\b")


@rule("wheel-platform")
def compile_backend_on_rocm(ctx: Context) -> Optional[Diagnosis]:
    """torch.compile's backend failing on a ROCm torch, no other family's error beside it: the Triton beside torch."""
    if any(e.family for e in ctx.errors) or ("Backend" not in _text(ctx) and "raised" not in _text(ctx)):
        return None
    lines = _lines_matching(ctx, _BACKEND_FAILED)
    if not lines or not _ROCM_TORCH.search(_text(ctx)):
        return None
    fix = _table_fix(ctx, "triton", "wheel-platform", frozenset({"linux", "amd"}), package="triton")
    if fix is None:
        return None
    return _make("wheel-platform", "torch.compile's Triton does not match the ROCm torch",
                 "torch.compile (inductor) fails inside its backend on a ROCm torch: it generates Triton kernels, and "
                 "a ROCm torch works only with the pytorch-triton-rocm release its index pins; another Triton (PyPI's "
                 "triton, an older pytorch-triton-rocm another package pulled in) breaks the compiler with errors "
                 "that name neither", f"pip list | grep -i triton shows which; {fix}",
                 [ctx.line_fact(lines[0])], lines[:1], confirmed=False)
