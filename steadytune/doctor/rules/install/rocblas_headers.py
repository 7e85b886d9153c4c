"""A ROCm build of CUDA code (hipified) that calls rocBLAS directly (rocblas_handle, rocblas_gemm_ex ...) without
including rocBLAS's header: hipify turns cuBLAS includes into hipBLAS ones only, and up to ROCm 5.6 the HIP/hipBLAS
headers happened to pull rocblas.h in. From ROCm 5.7 they no longer do, so such a translation unit stops compiling
("use of undeclared identifier 'rocblas_...'"). The fix is the include the file always needed.

Sources: deepspeedai/DeepSpeed#4507 (gemm_test.h uses rocblas_* and compiled only through the indirect include; with
ROCm 5.7 it fails; the posted fix, confirmed by another user: `#include <rocblas/rocblas.h>`), DeepSpeed PR 4538
("[ROCm] Add rocblas header", the same include, merged) and #4551 / PR 4557 (cublas_wrappers.h, the same)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# the compiler's words for a rocBLAS name it has no declaration of
_UNDECLARED = re.compile(r"(?i)(?:undeclared identifier|was not declared|unknown type name|does not name a type|"
                         r"has not been declared|no member named)\s*'?(rocblas_\w+)|'(rocblas_\w+)'\s*(?:was not declared|"
                         r"does not name a type|has not been declared)")
# the same said in words: "uses rocblas ... but does not include rocblas" (and "dose not", "doesn't")
_SAID = re.compile(r"(?i)\brocblas\b.{0,80}\b(?:not|n't|never)\s+includ\w*|(?:not|n't|never)\s+includ\w*\s.{0,30}\brocblas\b")
# a source file named in the paste (the one to patch)
_SOURCE_FILE = re.compile(r"([\w./-]*?[\w-]+\.(?:h|hpp|cuh|cu|cpp|cc))\b")


@rule("rocm-libs-missing")
def rocblas_used_without_its_header(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a rocBLAS name undeclared in a compile, or the paste saying the code uses rocBLAS without
    including it."""
    lines = _lines_matching(ctx, _UNDECLARED) or _lines_matching(ctx, _SAID)
    if not lines:
        return None
    text = _text(ctx)
    files = [m.group(1) for m in _SOURCE_FILE.finditer(text)
             if not re.search(r"(?:roc|hip)blas\w*\.h$", m.group(1))]   # not the library's own headers
    # the file the paste points at (a URL's path or a compiler's "file:line:"): its last path part
    target = files[0].rsplit("/", 1)[-1] if files else "the file that calls rocblas_*"
    rocm = re.search(r"(?i)\brocm[-_ ]?(\d+\.\d+)", text)
    since = f"ROCm {rocm.group(1)}" if rocm else "ROCm 5.7 and later"
    return _make("rocm-libs-missing", "rocBLAS is used without its header",
                 "the code calls rocBLAS directly (rocblas_* names) but includes only HIP / hipBLAS headers, which "
                 f"pulled rocblas.h in indirectly up to ROCm 5.6; {since} no longer does, so the names are undeclared",
                 f"add #include <rocblas/rocblas.h> to {target} (beside its other includes, in the ROCm branch), or "
                 "update the program to a release that includes it (DeepSpeed added it in PR 4538); then rebuild "
                 "(for DeepSpeed's JIT ops, delete ~/.cache/torch_extensions first)",
                 [], lines[:1])
