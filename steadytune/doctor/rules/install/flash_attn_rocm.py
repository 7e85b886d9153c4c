"""flash-attn failing to build or run on an AMD GPU its Composable Kernel backend does not cover
(MI200 / MI300 / MI355: gfx90a, gfx942, gfx950); its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE") covers
the other ROCm GPUs (https://github.com/Dao-AILab/flash-attention#amd-rocm-support). Split out of library_pages.py in
round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.hardware.gpu_facts import normalise_gfx


# a failure said: an error line, a refusal, a crash
_FAILS = re.compile(r"(?i)\berror\b|not supported|unsupported|fail\w*|exception|invalid device function|"
                    r"no kernel image|doesn'?t work|does not work|crash\w*|Traceback")

# the flash-attention README's AMD section: "FlashAttention-2 ROCm CK backend currently supports: MI200x, MI250x,
# MI300x, and MI355x GPUs" -- gfx90a, gfx942 and gfx950 (Dao-AILab/flash-attention#amd-rocm-support, checked round 18)
_CK_ARCHS = ("gfx90a", "gfx942", "gfx950")


@rule("attention")
def flash_attn_amd_outside_ck(ctx: Context) -> Optional[Diagnosis]:
    """flash-attn failing to build or run on an AMD GPU that its Composable Kernel backend does not cover (the CK
    backend builds for MI200 / MI300 / MI355 only); the Triton backend runs on the other ROCm GPUs."""
    text = _text(ctx)
    if not re.search(r"(?i)flash[-_]?attn|flash[-_]attention", text) or "FLASH_ATTENTION_TRITON_AMD_ENABLE" in text:
        return None
    archs = [normalise_gfx(f.value) for f in ctx.sheet.of("arch") if f.value.startswith("gfx")]
    if not archs or any(a in _CK_ARCHS for a in archs):
        return None
    failed = _lines_matching(ctx, _FAILS)
    if not failed:
        return None
    arch = archs[0]
    return _make("attention", f"flash-attn's CK backend does not build for {arch}",
                 f"flash-attn's default ROCm backend (Composable Kernel) is built for MI200 / MI300 (gfx90a, gfx942, "
                 f"gfx950) only; on {arch} it fails to build or has no kernels, while its Triton backend covers the "
                 "other ROCm GPUs",
                 "skip flash-attn and use PyTorch's SDPA attention: attn_implementation=\"sdpa\" in from_pretrained "
                 "(LLaMA-Factory: flash_attn: sdpa; pip uninstall -y flash-attn); or, for flash-attn itself, its Triton "
                 "backend: FLASH_ATTENTION_TRITON_AMD_ENABLE=\"TRUE\" pip install flash-attn --no-build-isolation (a "
                 "ROCm torch and its triton installed first), with FLASH_ATTENTION_TRITON_AMD_ENABLE=\"TRUE\" "
                 "exported when running", [], failed[:1])
