"""A program shipped as a prebuilt binary with CUDA inside (not built by the user, not a torch wheel) failing with "no
kernel image is available" on a Blackwell GPU (sm_100 / sm_120): its default build is compiled with a CUDA older than
12.8, the first that knows Blackwell, so it has no code for the card; the program's own CUDA 12.8 build has. The fix is
that build (and the release that first shipped it), not a rebuild of llama.cpp by the user. A table, one row per
program, with where each fact comes from.

Sources: gpustack/gpustack#1382 (llama-box on an RTX 5090D: the CUDA 12.8 build of llama-box, v0.0.129, in GPUStack's
main fixed it, confirmed by the maintainers' QA); gpustack/gpustack#2283 (the maintainer: for a container install the
image with the -cuda12.8 tag; for a script install, replace llama-box with the -cuda-12.8 binary, e.g.
releases/download/v0.0.155/llama-box-linux-amd64-cuda-12.8.zip); CUDA 12.8 first knowing sm_100 / sm_120:
cuda_builds._NVCC_FIRST (NVIDIA's release notes), its driver floor (570) from cuda_builds' driver table."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


class PrebuiltCuda(NamedTuple):
    name: str
    said: "re.Pattern[str]"     # the program named in the paste
    first: str                  # its first release with a CUDA 12.8 build
    build: str                  # that build, as its release assets name it
    host: str                   # how the program's host application takes that build


_PROGRAMS = (
    PrebuiltCuda("llama-box", re.compile(r"(?i)\bllama-box\b"), "v0.0.129", "llama-box-linux-amd64-cuda-12.8",
                 "in GPUStack: a GPUStack release that ships it (its container image with the -cuda12.8 tag), or "
                 "replace GPUStack's bundled llama-box binary with that build"),
)
_NO_IMAGE = re.compile(r"(?i)no kernel image is available|cudaErrorNoKernelImageForDevice|no device code compatible")
_BLACKWELL = ("sm_100", "sm_101", "sm_120", "sm_121")


@rule("arch-missing")
def prebuilt_cuda_program_on_blackwell(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a program of the table named, a Blackwell GPU, and CUDA's "no kernel image"."""
    lines = _lines_matching(ctx, _NO_IMAGE)
    arch, fact = ctx.arch(lines)
    if not lines or arch not in _BLACKWELL:
        return None
    text = _text(ctx)
    for row in _PROGRAMS:
        if not row.said.search(text):
            continue
        return _first(_make(
            "arch-missing", f"this {row.name} build has no code for {arch} (Blackwell)",
            f"the {row.name} binary in use is compiled with a CUDA older than 12.8, the first CUDA that knows "
            f"Blackwell ({arch}), so none of its kernels run on this GPU",
            f"use {row.name}'s CUDA 12.8 build ({row.build}, from {row.first}; the same -cuda-12.8 asset for other "
            f"platforms) with a driver of the 570 series or newer; {row.host}",
            [f for f in (fact,) if f], lines[:2]))
    return None
