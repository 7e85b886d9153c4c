"""ChatGLM's quantize(): the int4 / int8 kernels it loads through cpm_kernels are precompiled for a fixed list of GPU
architectures, so "CUDA Error: no kernel image is available for execution on the device" on quantize (while the same
model runs unquantized) is the GPU outside that list, not torch. Below the list (compute capability under 6.1: Tesla
P100, Maxwell, Kepler) the way out is the unquantized model or a newer GPU; above it (compute capability 9.0 and newer:
H100 sm_90, B200 sm_100, RTX 50 sm_120) cpm_kernels' kernels rebuilt with the GPU's arch. A GPU inside the list
(6.1 to 8.9) has code, so the error is not this reading's.

Facts: cpm_kernels' cuda/Makefile (OpenBMB/cpm_kernels, checked v20 at its last commit 277a0ed) builds each kernel as a
fatbin with -gencode arch=compute_XX,code=sm_XX for sm_61, sm_62, sm_70, sm_72, sm_75, sm_80 and sm_86 only: cubins, no
PTX. ChatGLM's quantization.py carries its own such fatbin (the bz2 / base64 quantization_code it loads through
cpm_kernels' LazyKernelCModule); decoded in v20 (the copy in Tongjilibo/bert4torch's quantizers/
quantizer_cpm_kernels.py, whose string begins as the ChatGLM quantization.py copies in the code index do) it
holds the same seven ELF cubins (sm_61, 62, 70, 72, 75, 80, 86) and no PTX. A cubin runs on its own major at the same or a higher minor (CUDA's binary compatibility), so the code
covers 6.1-6.2, 7.x and 8.x (an sm_87 Orin or sm_89 Ada card runs the sm_86 / sm_80 cubins) and nothing of 9.0 or later
or under 6.1; this matches the BMInf maintainers' floor of 6.1 for cpm_kernels (OpenBMB/BMInf#29). ChatGLM3#695's
maintainer said the card was too old and named a Volta-generation GPU as the floor; the build files put it lower, at
Pascal's 6.1 (GTX 10xx, Tesla P4 / P40 have code), so that floor is quoted as the maintainer's word only. Users add
compute_90 / 120 and build from source (OpenBMB/cpm_kernels#9 and #13, ChatGLM-6B#1347), which reaches code that loads
cpm_kernels' own fatbins, not ChatGLM's embedded copy. ChatGLM-6B#1322 (a Maxwell GTX TITAN X, int8 quantize, no kernel
image) fits the 6.1 floor.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule


_NO_IMAGE = re.compile(r"(?i)no kernel image is available for execution")
_QUANTIZE = re.compile(r"(?i)\.quantize\(|\bcpm_kernels\b|quantization_bit|\bquantiz\w*\b.{0,40}\bchatglm|\bchatglm\w*\b.{0,80}"
                       r"(?:quantiz|int4|int8)|量化")
_NEWEST = 86   # cpm_kernels' Makefile (and ChatGLM's own fatbin) ends at sm_86, as cubins without PTX
_OLDEST = 61   # ... and starts at sm_61


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
    if cc is not None and _OLDEST <= cc and cc // 10 <= _NEWEST // 10:
        return None     # 6.1 to 8.x: a cubin of the list runs on it (same major, same or higher minor)
    if cc is not None and cc > _NEWEST:
        # ahead of the torch arch reading of the same line: torch runs this GPU, the quantize kernels do not
        diagnosis = _make("arch-missing", f"cpm_kernels' quantize kernels have no code for {arch}",
                          f"quantize() loads int4 / int8 kernels precompiled as cubins for sm_{_OLDEST} to sm_{_NEWEST} "
                          f"with no PTX, so no GPU of compute capability 9.0 or newer can run them; this GPU is {arch}",
                          f"run the model unquantized (FP16/BF16, this GPU has the memory for more), or build cpm_kernels from "
                          f"source with -gencode arch=compute_{cc},code=sm_{cc} added to its cuda/Makefile and reinstall it "
                          "(that reaches code loading cpm_kernels' own kernels; ChatGLM's quantization.py embeds its own "
                          "prebuilt copy of them)",
                          [fact, ctx.line_fact(lines[0])], lines[:1])
        return _ahead_of(diagnosis, "arch-missing")
    said = f"this {arch} GPU" if cc is not None else "the GPU"
    return _make("gpu-unsupported", "the GPU is too old for ChatGLM's quantize() kernels",
                 "quantize() runs precompiled int4 / int8 kernels (through cpm_kernels) that have no code for "
                 f"{said}; the unquantized model runs because torch's own kernels cover it",
                 "the GPU is too old for the prebuilt quantization kernels (their cubins start at compute capability "
                 "6.1, Pascal's GTX 10xx / Tesla P4 / P40; Tesla P100 at 6.0, Maxwell and Kepler have none; ChatGLM3's "
                 "maintainer names a Volta-generation GPU as the floor): run without quantize() (FP16: more GPU "
                 "memory), or use a GPU of compute capability 6.1 or newer (Volta or newer, as the maintainer says, is "
                 "the safe choice)",
                 [f for f in (fact, ctx.line_fact(lines[0])) if f is not None], lines[:1],
                 confirmed=cc is not None and cc < _OLDEST)
