"""Windows refusing a ROCm DLL's entry point ("The procedure entry point roclabs_bfdot_64 could not be located in the
dynamic link library ...\\hip_blas.dll", exit status 0xc0000139): the program was built against one HIP SDK
release's libraries, and the DLLs it loads (a rocBLAS swapped in from a ROCmLibs package for an unsupported GPU, a
HIP SDK on PATH) are another release's, which lack that function. The fix is the library package made for the HIP
SDK the program was built with; a table names it for programs whose builds say so."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# the loader's words: the entry point missing in a ROCm / HIP library (its status code alone, 0xc0000139, is more often
# a graphics driver older than the program's amdhip64: the driver readings own it)
_ENTRY_POINT = re.compile(r"(?i)entry point \S{1,80} could not be located in the dynamic link library [^\n]{0,200}?"
                          r"(?:roc\w*|hip\w*|amdhip64\w*|MIOpen\w*)\.dll")

# programs whose Windows builds name the HIP SDK release they were built with: (program, release regex, HIP SDK, source)
# (ollama-for-amd follows Ollama's releases and their HIP SDK)
BUILT_WITH = (
    ("ollama", r"(?i)\bollama\b[^\n]{0,40}?\b0\.5\.\d+\b|\b0\.5\.\d+-0-g[0-9a-f]+", "6.1.2",
     "Ollama's Windows release workflow for the 0.5 series installs HIP SDK 6.1.2; likelovewant/ollama-for-amd "
     "issues 41 and 55 (its 0.5.x builds with the HIP 6.1.2 ROCmLibs)"),
)


def _hip_sdk_of(text: str) -> Optional[tuple[str, str]]:
    """(program, HIP SDK release) for a program of the table named with one of its releases."""
    for program, release, sdk, _source in BUILT_WITH:
        if re.search(release, text):
            return program, sdk
    return None


@rule("wheel-platform")
def rocm_dll_of_another_release(ctx: Context) -> Optional[Diagnosis]:
    """A ROCm DLL without the entry point the program calls: the DLLs are another HIP SDK release's."""
    text = _text(ctx)
    if "entry point" not in text.lower():
        return None
    lines = _lines_matching(ctx, _ENTRY_POINT)
    if not lines:
        return None
    known = _hip_sdk_of(text)
    sdk = known[1] if known else "<the release the program was built with; its release notes say>"
    program = known[0] if known else "the program"
    return _make("wheel-platform", "ROCm DLLs of another HIP SDK release than the program's",
                 f"{program} was built against the HIP SDK {sdk} libraries, and the ROCm DLLs it loads (rocBLAS / "
                 "hipBLAS, often swapped in from a ROCmLibs package made for an unsupported GPU) are another release's, "
                 "which lack a function it calls, so Windows stops the load (0xc0000139, entry point not found)",
                 f"put back DLLs of the HIP SDK {sdk} release: the ROCmLibs package for this GPU built for HIP SDK "
                 f"{sdk} (rocblas.dll and rocblas\\library, into the program's lib\\ollama or rocm folder as its guide "
                 "says), or reinstall the program to restore its own; keep the HIP SDK on PATH at the same release",
                 [ctx.line_fact(lines[0])], lines[:2])
