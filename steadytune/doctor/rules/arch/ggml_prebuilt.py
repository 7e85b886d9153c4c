"""ggml's "no device code compatible with CUDA arch NNN" from a program run as its prebuilt binary (koboldcpp's exe):
the user did not compile it, so the catalogue's rebuild with CMAKE_CUDA_ARCHITECTURES is not the first answer; the
program's other prebuilt build, whose CUDA release compiles the older architectures (koboldcpp's CUDA 12 build beside
its default CUDA 11 one), is, from arch_builds.yaml. "arch 520" is the fallback ggml reports when the binary has
nothing for the card (its lowest target), not the card's own capability.

Sources: LostRuins/koboldcpp#1362 (a Pascal GP100 failing with koboldcpp.exe 1.85, CUDA 11, "mul_mat_vec has no
device code compatible with CUDA arch 520"; koboldcpp_cu12.exe 1.85, or the 1.78 CUDA 11 build, runs it);
koboldcpp's README (the cu12 and Vulkan builds)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.archs import tool_builds
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_NO_CODE = re.compile(r"has no device code compatible with CUDA arch (\d+)")
# the program running from its release binary, by its own start-up words or the exe's name
_PREBUILT = {"koboldcpp": re.compile(r"(?i)Welcome to KoboldCpp|koboldcpp(?:_\w+)?\.exe|koboldcpp_cublas\.dll|"
                                     r"koboldcpp-linux-x64")}
_ALREADY_CU12 = re.compile(r"(?i)koboldcpp_cu12(?:\.exe)?\b[^\n]{0,40}\b(?:fails?|same|also|too|crash)|"
                           r"(?:running|using|with|tried) koboldcpp_cu12")


@rule("arch-missing")
def prebuilt_ggml_program_without_the_arch(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _NO_CODE)
    if not said:
        return None
    text = _text(ctx)
    for tool, prebuilt in _PREBUILT.items():
        build = tool_builds().get(tool)
        if build is None or not build.cuda or not prebuilt.search(text) or _ALREADY_CU12.search(text):
            continue
        arch, fact = ctx.arch(said)
        cc = arch[3:] if arch and arch.startswith("sm_") else None
        fix = build.cuda.format(cc=cc or "<cc>", cc_dot=f"{cc[:-1]}.{cc[-1]}" if cc else "the GPU's compute capability",
                                sm=arch or "sm_<cc>", cu="cu126")
        return _make("arch-missing", f"{build.name}'s prebuilt CUDA build has no code for this GPU",
                     f"the {build.name} binary in use was compiled for other GPU architectures than this card's (ggml "
                     f"reports arch {_NO_CODE.search(said[0].line).group(1)}, its lowest target, when nothing fits), "
                     f"so its CUDA kernels cannot run; its other prebuilt CUDA build carries more of them", fix,
                     [f for f in (fact,) if f], said[:1])
    return None
