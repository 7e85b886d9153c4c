"""jax's GPU solvers failing to start, "cuSolver internal error" (gpusolverDnCreate failed), on a jax[cuda12] install
whose pip cuBLAS is older than the cuSOLVER it was installed with: jax-cuda12-plugin 0.6.1 required
nvidia-cublas-cu12<12.9 (jax-ml/jax#28513, a cuDNN bug with cuBLAS 12.9), so pip kept a cuBLAS 12.8 / 12.6 beside the
newer cuSOLVER, whose handle creation then fails; the cap was reverted right after 0.6.1 (#28897, in 0.6.2).

Decided by: cuSolver's "internal error" in a jax paste. Sources: jax-ml/jax#29065 (the maintainer: 0.6.1's upper limit
on the cublas dependency, removed for the next release), #29475 ("pip install -U nvidia-cublas-cu12 fully resolves
this"), robfiras/loco-mujoco#72 (nvidia-cublas-cu12>=12.9 on top of jax[cuda12] 0.6.1 fixed training)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_CUSOLVER = re.compile(r"(?i)cuSolver internal error|gpusolverDnCreate\(&handle\) failed")


@rule("wheel-platform")
def jax_cublas_older_than_cusolver(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    lines = _lines_matching(ctx, _CUSOLVER)
    if not lines or not re.search(r"(?i)\bjax|\bflax\b|\bbrax\b|\bmjx\b", text):
        return None
    # an older jax (0.4.x, 0.5.x) had its cuSolver failures from other causes (jax-ml/jax#21950: the pip nvcc's ptxas)
    older = re.search(r"(?i)\bjax(?:lib)?\s*(?:==|\s|:)\s*0\.([0-5])\.\d+", text)
    if older:
        return None
    pinned = re.search(r"(?i)\bjax(?:lib|-cuda12-plugin)?\s*(?:==|\s)\s*0\.6\.1\b|jax\[cuda12\]\s*0\.6\.1", text)
    return _first(_make(
        "wheel-platform", "jax's pip cuBLAS is older than its cuSOLVER",
        "cuSOLVER's handle could not be created: the pip nvidia-cublas-cu12 in this environment is older than the "
        "nvidia-cusolver-cu12 beside it" + (" (jax 0.6.1's CUDA plugin capped cuBLAS below 12.9)" if pinned else
                                            " (jax-cuda12-plugin 0.6.1 capped it below 12.9)"),
        "upgrade the pip cuBLAS over jax's pin: pip install -U \"nvidia-cublas-cu12>=12.9\" (uv pip install the same; pip "
        "warns about the 0.6.1 plugin's cap, which is harmless), or move to a jax release after 0.6.1: pip install -U "
        "\"jax[cuda12]\"; pip list | grep nvidia-cublas must show 12.9 or newer",
        [ctx.line_fact(lines[0])], lines[:1]))
