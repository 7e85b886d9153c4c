"""XLA (JAX, TensorFlow) compiling with a ptxas that does not know this GPU, found on PATH: the CUDA pip wheels
bring their own newer ptxas (nvidia-cuda-nvcc-cu12, which "jax[cuda12]" installs), and an older CUDA toolkit's bin
folder earlier on PATH shadows it. The install mixes two CUDAs: the wheel family's reading, not the GPU's arch."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.cuda_builds import _NVCC_FIRST
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

# XLA's stream executor: "ptxas does not support CC 8.9" then "Used ptxas at /usr/local/cuda-11.4/bin/ptxas"
_NO_CC = re.compile(r"ptxas does not support CC (\d{1,2})\.(\d)")
_USED = re.compile(r"Used ptxas at (\S{1,200})")


@rule("wheel-platform")
def older_ptxas_on_path(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _NO_CC.pattern)[:1]
    if not said:
        return None
    cc = _NO_CC.search(said[0].line)
    used = next((m.group(1) for line in _lines_matching(ctx, _USED.pattern) for m in [_USED.search(line.line)] if m),
                None)
    if used and "site-packages/nvidia" in used:
        return None   # the pip wheel's own ptxas is the old one: upgrading that wheel is the arch reading's fix
    digits, dotted = cc.group(1) + cc.group(2), f"{cc.group(1)}.{cc.group(2)}"
    needs = _NVCC_FIRST.get(digits, "a newer CUDA toolkit")
    where = f" ({used})" if used else ""
    jax = bool(_lines_matching(ctx, r"(?i)\bjax(?:lib)?\b"))
    install = 'pip install -U "jax[cuda12]"' if jax else "pip install -U nvidia-cuda-nvcc-cu12"
    return _make("wheel-platform", f"an older CUDA toolkit's ptxas on PATH does not know CC {dotted}",
                 f"XLA compiles its kernels with the first ptxas it finds; the one it used{where} predates compute "
                 f"capability {dotted}, so it falls back to the driver and the kernel image is invalid",
                 f"use the ptxas that comes with the CUDA pip wheels: {install} (it brings nvidia-cuda-nvcc-cu12's "
                 f"ptxas), and take the older CUDA toolkits' bin folders out of PATH (which -a ptxas lists them), or "
                 f"put a toolkit whose ptxas knows CC {dotted} ({needs} or newer) first on PATH",
                 [ctx.line_fact(said[0])], said + ctx.of("arch-missing"))
