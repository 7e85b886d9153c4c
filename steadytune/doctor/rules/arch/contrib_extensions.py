"""flash-attn's optional CUDA extensions (csrc/layer_norm, csrc/rotary, csrc/xentropy, csrc/fused_dense_lib) with no
kernels for the GPU: they are built apart from flash-attn itself and no longer follow new GPUs, while flash-attn
ships Triton versions of the same ops that compile for whatever GPU runs them. The fix is the Triton op, not a
rebuild of flash-attn."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, rule, _text

# extension (as its path or module names it) -> the Triton op flash-attn ships in its place
# (Dao-AILab/flash-attention: flash_attn/ops/triton/layer_norm.py, rotary.py, cross_entropy.py)
_TRITON_OPS = (
    (r"csrc/layer_norm|dropout_layer_norm|ln_(?:fwd|bwd)_kernels", "layer norm",
     "flash_attn.ops.triton.layer_norm (layer_norm_fn / RMSNorm)"),
    (r"csrc/rotary|\brotary_emb\b", "rotary embedding", "flash_attn.ops.triton.rotary (apply_rotary)"),
    (r"csrc/xentropy|\bxentropy_cuda_lib\b", "cross entropy", "flash_attn.ops.triton.cross_entropy"),
)
_NO_KERNEL = re.compile(r"(?i)no kernel image is available|CUDA_ERROR_NO_BINARY_FOR_GPU|invalid device function")


@rule("arch-missing")
def contrib_extension_without_kernels(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _NO_KERNEL.search(text):
        return None
    for pattern, op, triton in _TRITON_OPS:
        lines = _lines_matching(ctx, pattern)
        if lines:
            card = next((g for g in ctx.sheet.of("gpu") if (g.detail or "").startswith("sm_")), None)
            the = f"the {card.value} ({card.detail})" if card else "this GPU"
            diagnosis = _make("arch-missing", f"flash-attn's {op} extension has no kernels for {the}",
                         f"the separately built {op} CUDA extension of flash-attention carries no code for {the} "
                         "and is no longer updated for new GPUs",
                         f"use flash-attn's Triton {op} instead of the compiled extension: {triton} (Triton compiles "
                         f"it for {the} when it runs); uninstall the old extension (pip uninstall -y "
                         f"{'dropout_layer_norm' if op == 'layer norm' else 'the ' + op + ' extension'}) so the model "
                         "code falls back to it", [card] if card else [],
                         lines[:1] + _lines_matching(ctx, _NO_KERNEL.pattern)[:1])
            # the extension that lacks the code is named: it goes before the generic "this build has no code" reading
            return _ahead_of(diagnosis, "arch-missing")
    return None
