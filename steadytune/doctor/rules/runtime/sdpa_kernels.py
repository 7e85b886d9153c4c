"""torch's scaled_dot_product_attention refusing every kernel: "RuntimeError: No available kernel. Aborting execution."
The fused kernels (flash, memory-efficient, cuDNN) each check the call's inputs and skip themselves with a UserWarning
that says why ("Both fused kernels requires query, key and value to be 4 dimensional, but got Query dim: 3 ...",
"Flash attention only supports dtypes fp16 and bf16", a head dim or mask they do not take); when the math kernel is
also ruled out (a `sdp_kernel` / `sdpa_kernel` context that enables only the fused ones, or a GPU / tensors it cannot
serve) nothing is left. The wheel is not at fault (the official CUDA builds carry flash attention): the inputs are.
Source: pytorch/pytorch#117354 (drisspg: the inputs were 3-D, unsqueeze them to (batch, heads, seq, dim))."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_NO_KERNEL = re.compile(r"No available kernel\.\s+Aborting execution")
_NOT_4D = re.compile(r"(?i)requires query, key and value to be 4 dimensional|Query dim: 3")
_DTYPE = re.compile(r"(?i)only supports dtypes? (?:fp16 and bf16|torch\.float16)|Expected query, key and value to all be of "
                    r"dtype")


@rule("attention")
def sdpa_no_available_kernel(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: SDPA's own "No available kernel" error (the warnings before it, where pasted, name the check)."""
    lines = _lines_matching(ctx, _NO_KERNEL)
    if not lines:
        return None
    text = _text(ctx)
    why = ("the inputs are 3-D and the fused kernels take only 4-D tensors" if _NOT_4D.search(text) else
           "the inputs are float32 and the flash kernel takes only fp16 / bf16" if _DTYPE.search(text) else
           "each fused kernel skipped the call for its inputs (the UserWarnings printed just before say which check)")
    return _first(_make(
        "attention", "scaled_dot_product_attention found no kernel for these inputs",
        f"torch's fused attention kernels (flash, memory-efficient) check the call's tensors and skip it when they do "
        f"not fit; with the math kernel ruled out too (a sdp_kernel / sdpa_kernel context that enables only the fused "
        f"ones) none is left: {why}. The wheel carries the kernels; the inputs do not fit them",
        "give the call what the fused kernels take: 4-D query / key / value shaped (batch, heads, seq_len, head_dim) - "
        "for 3-D (batch, seq, dim) tensors q = q.unsqueeze(1) (same for k and v; squeeze(1) the output) - in fp16 or "
        "bf16 for flash; or allow the math backend (drop enable_math=False / list SDPBackend.MATH in sdpa_kernel); "
        "the UserWarnings just before the error name the check that failed",
        [ctx.line_fact(lines[0])], lines[:1]))
