"""A kernel whose source guard admits one exact architecture ("This kernel only supports sm120", CUTLASS-based
kernels built with an exact __CUDA_ARCH__ test) run on a GPU of the same major and another minor (a GB10/DGX Spark is
sm_121, a B300 sm_103): the GPU runs that major's code, but the guard traps. The fix is a build whose guard takes the
whole family (vLLM's enable_smXX_family instead of enable_smXX_only), not another torch or driver."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

_ONLY = re.compile(r"(?i)\bkernel only supports sm_?(\d{2,3})\b")


@rule("arch-missing")
def exact_arch_guard(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _ONLY.pattern)[:1]
    if not said:
        return None
    wanted = _ONLY.search(said[0].line).group(1)
    gpus = [g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_\d{2,3}", g.detail or "")]
    gpu = next((g for g in gpus if g.detail[3:] != wanted and g.detail[3:-1] == wanted[:-1]), None)
    if gpu is None:
        return None   # another major (or no GPU named): a build without the GPU's code, arch_missing.py's reading
    arch, tool = gpu.detail, ctx.tool()
    vllm = (f"rebuild vLLM from source with the guard widened: in its CUTLASS scaled_mm wrappers (csrc/quantization/"
            f"..._scaled_mm*.cuh) replace enable_sm{wanted}_only with enable_sm{wanted}_family, then "
            f"TORCH_CUDA_ARCH_LIST={arch[3:-1]}.{arch[-1]} pip install -e . --no-build-isolation; or use a vLLM "
            "release or image built with the family guard") if tool == "vllm" else \
        (f"rebuild the kernel with a guard for the sm_{wanted[:-1]}x family (e.g. __CUDA_ARCH__ >= {wanted}0 and < "
         f"{int(wanted[:-1]) + 1}00, or CUTLASS's family-specific target sm_{wanted}f) and "
         f"TORCH_CUDA_ARCH_LIST={arch[3:-1]}.{arch[-1]}, or use a release of the tool built that way")
    return _make("arch-missing", f"a kernel guarded for sm_{wanted} only, on {arch}",
                 f"the kernel's source admits exactly sm_{wanted}; the {gpu.value} is {arch}, of the same family, so "
                 "its code would run but the guard traps", vllm, [gpu], said, confirmed=False)
