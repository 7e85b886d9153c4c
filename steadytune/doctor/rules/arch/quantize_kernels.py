"""ChatGLM's quantize(): the int4 / int8 kernels it loads through cpm_kernels are precompiled for a fixed list of GPU
architectures, so "CUDA Error: no kernel image is available for execution on the device" on quantize (while the same
model runs unquantized) is the GPU outside that list, not torch. Below the list (the maintainers: a Volta-generation
GPU or newer; 10-series cards lack them) the way out is the unquantized model or a newer GPU; above it (Jetson Orin
sm_87, H100 sm_90, RTX 50 sm_120) cpm_kernels rebuilt with the GPU's arch.

Facts: ChatGLM3#695's maintainer (the card is too old for quantize(), needs Volta or newer); cpm_kernels' cuda/Makefile
gencodes sm_61..sm_86 (OpenBMB/cpm_kernels#9 and #13, ChatGLM-6B#1347: users add compute_87 / 90 / 120 and build from
source).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule


_NO_IMAGE = re.compile(r"(?i)no kernel image is available for execution")
_QUANTIZE = re.compile(r"(?i)\.quantize\(|\bcpm_kernels\b|quantization_bit|\bquantiz\w*\b.{0,40}\bchatglm|\bchatglm\w*\b.{0,80}"
                       r"(?:quantiz|int4|int8)|量化")
_NEWEST = 86   # cpm_kernels' Makefile ends at sm_86


@rule("gpu-unsupported")
def chatglm_quantize_kernels(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _QUANTIZE.search(text):
        return None
    lines = _lines_matching(ctx, _NO_IMAGE)
    if not lines:
        return None
    arch, fact = ctx.arch(lines)
    cc = int(arch[3:]) if arch and re.fullmatch(r"sm_\d+", arch) else None
    if cc is not None and cc > _NEWEST:
        # ahead of the torch arch reading of the same line: torch runs this GPU, the quantize kernels do not
        diagnosis = _make("arch-missing", f"cpm_kernels' quantize kernels have no code for {arch}",
                          f"quantize() loads int4 / int8 kernels that cpm_kernels precompiled up to sm_{_NEWEST}; this GPU is "
                          f"{arch}, newer than that list",
                          f"run the model unquantized (FP16/BF16, this GPU has the memory for more), or build cpm_kernels from "
                          f"source with -gencode arch=compute_{cc},code=sm_{cc} added to its cuda/Makefile and reinstall it",
                          [fact, ctx.line_fact(lines[0])], lines[:1])
        return _ahead_of(diagnosis, "arch-missing")
    said = f"this {arch} GPU" if cc is not None else "the GPU"
    return _make("gpu-unsupported", "the GPU is too old for ChatGLM's quantize() kernels",
                 "quantize() runs precompiled int4 / int8 kernels (through cpm_kernels) that have no code for "
                 f"{said}; the unquantized model runs because torch's own kernels cover it",
                 "the GPU is too old for the prebuilt quantization kernels (the maintainers: an NVIDIA Volta-generation "
                 "GPU, V100 / RTX 20xx, or newer; 10-series cards lack them): run without quantize() (FP16: more GPU "
                 "memory), or use a Volta or newer GPU",
                 [f for f in (fact, ctx.line_fact(lines[0])) if f is not None], lines[:1],
                 confirmed=cc is not None and cc < 70)
