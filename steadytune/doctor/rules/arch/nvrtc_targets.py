"""NVRTC asked for a GPU arch its CUDA release does not know ("nvrtc: error: invalid value for --gpu-architecture"):
code compiled at run time (torch's fused kernels, CuPy's, a JIT extension's) goes through the NVRTC of the CUDA the
program was built with, which names only the archs of its own release. A GPU newer than that release (an RTX 30 card
under CUDA 11.0's NVRTC, an RTX 40 under 11.3's), or older than the archs it still compiles (a Pascal card under CUDA
13's), gets the error; the fix is a build of the program for a CUDA whose NVRTC knows the GPU."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import cuda_wheel_for, dotted
from steadytune.doctor.rules.arch.cuda_builds import _NVCC_FIRST, _NVCC_OLDEST, _cuda_build
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _make, rule, _text

_NVRTC_ARCH = re.compile(r"(?i)nvrtc: error: invalid value for --gpu-architecture")


# torch named with its release in words ("pytorch 1.14+cu117 nightly", "torch 1.12"): the patch may be left out
_TORCH_SAID = re.compile(r"(?i)\b(?:py)?torch\s*(?:==|version:?|v)?\s*(\d)\.(\d{1,2})(?:\.(\d+))?(?![\d.])")
# The first torch release that caps the arch it asks NVRTC for at the newest one the NVRTC of its CUDA knows, by the
# GPU's compute capability: 1.7.1 capped Ampere (sm_86) under CUDA 11.0's NVRTC (pytorch/pytorch#48151, cherry-picked
# from #47658); 1.13 capped Ada and Hopper (sm_89, sm_90) at sm_86 under the NVRTC of CUDA 11.7 and older
# (pytorch/pytorch#87611, in the nightlies from late October 2022 and in the 1.13 release)
_NVRTC_CAPPED = ((89, (1, 13, 0), "Ada and Hopper (sm_89, sm_90) at sm_86 for the NVRTC of CUDA 11.7 and older"),
                 (86, (1, 7, 1), "Ampere (sm_86) at sm_80 for CUDA 11.0's NVRTC"))


def _torch_release(ctx: Context) -> Optional[tuple[int, int, int]]:
    for value in ctx.sheet.values("torch"):
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", value)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3))
    said = _TORCH_SAID.search(_text(ctx))
    if said:
        return int(said.group(1)), int(said.group(2)), int(said.group(3) or 0)
    return None


def _newest_sm(ctx: Context) -> Optional[str]:
    """The newest NVIDIA arch the paste shows: NVRTC not knowing an arch fails on the newest card (an older one beside
    it, "on my RTX 3090 it works", is known to the same NVRTC)."""
    archs = {f.value for f in ctx.sheet.of("arch") if re.fullmatch(r"sm_\d{2,3}", f.value)}
    return max(archs, key=lambda a: int(a[3:]), default=None)


@rule("arch-missing")
def nvrtc_unknown_arch(ctx: Context) -> Optional[Diagnosis]:
    errors = [e for e in ctx.of("arch-missing") if _NVRTC_ARCH.search(e.line)]
    if not errors:
        return None
    arch, where = ctx.arch(errors)
    sm = arch if arch and re.fullmatch(r"sm_\d{2,3}", arch) else None
    build = _cuda_build(ctx)
    cupy = re.search(r"(?i)\bcupy\b", _text(ctx))
    cc = int(sm[3:]) if sm else None
    said_cuda = next((int(v.split(".")[0]) for v in ctx.sheet.values("cuda") if re.match(r"\d+\.\d", v)), None)
    openmm = re.search(r"(?i)\bopenmm\b", _text(ctx))
    major = build[0] if build else said_cuda
    if cc is not None and openmm and major and cc < _NVCC_OLDEST.get(major, 0):
        # OpenMM compiles its kernels with the NVRTC of the conda CUDA it is installed with: a GPU that CUDA release
        # dropped (Kepler sm_30 from CUDA 11, sm_35/37 from 12) needs OpenMM installed against the last CUDA that still
        # compiles it (openmm#3756: a Quadro K2000 under CUDA 11.4 -> cudatoolkit=10.2, the maintainer's answer; 10.2
        # and 11.8 are the last releases of CUDA 10 and 11; NVIDIA's CUDA GPUs table, checked v18b in a copy of it,
        # gives Quadro K2000 / K2000D / K600 / K420 / 410 compute capability 3.0)
        spec = "cudatoolkit=10.2" if cc < 35 else "cudatoolkit=11.8" if cc < 50 else "cuda-version=12"
        return _first(_make("gpu-unsupported", f"CUDA {major} no longer compiles {sm}; OpenMM's CUDA platform needs an "
                            "older CUDA",
                            f"OpenMM compiles its CUDA kernels at run time with the NVRTC of CUDA {major}, which dropped "
                            f"compute capability {dotted(cc)} (CUDA {major} compiles {dotted(_NVCC_OLDEST[major])} and "
                            "newer); the OpenCL platform still works on it",
                            f"install OpenMM against the last CUDA that still compiles {sm}: conda install -c conda-forge "
                            f"openmm {spec} (in a fresh environment; the driver runs older CUDA releases too), or use "
                            "OpenMM's OpenCL platform on this GPU",
                            [f for f in (where, ctx.line_fact(errors[0])) if f], errors))
    if cc is not None and build is not None and cc < _NVCC_OLDEST.get(build[0], 0):
        # the GPU is older than this NVRTC compiles: CUDA 12 dropped Kepler, CUDA 13 Maxwell to Volta
        older = build[0] - 1
        program = f"cupy-cuda{older}x" if cupy else f"a torch built for CUDA {older}.x"
        return _first(_make("arch-missing", f"CUDA {build[0]}'s NVRTC no longer compiles {sm}",
                            f"the program compiles kernels at run time with the NVRTC of CUDA {build[0]}.{build[1]}, "
                            f"which dropped compute capability {dotted(cc)}",
                            f"install {program}, whose NVRTC still compiles {sm} (CUDA {build[0]} compiles compute "
                            f"capability {dotted(_NVCC_OLDEST[build[0]])} and newer)",
                            [f for f in (where, ctx.line_fact(errors[0])) if f], errors))
    newest = _newest_sm(ctx)
    if newest and (cc is None or int(newest[3:]) > cc):
        sm, cc = newest, int(newest[3:])
    needs = _NVCC_FIRST.get(str(cc)) if cc else None
    known = f"{needs} or newer" if needs else "a CUDA release that knows the GPU"
    if cupy:
        fix = (f"install the CuPy wheel for {known} (pip uninstall the cupy-cudaXXx in place, then pip install "
               "cupy-cuda12x): CuPy compiles its kernels with the NVRTC of the CUDA it is installed for")
    else:
        wheel = cuda_wheel_for(sm) if sm else None
        fix = f"install a torch built for {known}" + (f": {wheel}" if wheel else
                                                      " (pip install -U torch from the pytorch.org CUDA index for it)")
        release = _torch_release(ctx)
        # (a GPU the paste does not name: the first cap, the one most torch builds of that time lacked)
        capped = (next(((first, what) for floor, first, what in _NVRTC_CAPPED if cc >= floor), None) if cc else
                  _NVRTC_CAPPED[-1][1:])
        nightly = re.search(r"(?i)\bnightl(?:y|ies)\b|\.dev\d{6,8}", _text(ctx))
        if capped and (release is None or release < capped[0] or nightly and release[:2] <= (capped[0][0], capped[0][1] + 1)):
            # a nightly of the next release made before the cap landed lacks it too
            first = ".".join(str(x) for x in capped[0]).removesuffix(".0")
            fix += (f"; or keep the CUDA and install at least torch {first}" + (" (or a nightly made after the "
                    "fix)" if nightly else "") + f", which caps the arch it asks NVRTC for: {capped[1]}")
    gpu = f"{sm} (compute capability {dotted(cc)})" if sm else "this GPU"
    used = f"CUDA {build[0]}.{build[1]}" if build else "the CUDA the program was built with"
    return _first(_make("arch-missing", f"NVRTC does not know {sm or 'this GPU'}",
                        f"kernels compiled at run time go through the NVRTC of {used}, which predates {gpu}"
                        + (f" ({needs} is the first that knows it)" if needs else ""),
                        fix + ("" if sm else "; the GPU's compute capability: nvidia-smi --query-gpu=name,compute_cap "
                                             "--format=csv"),
                        [f for f in (where, ctx.line_fact(errors[0])) if f], errors))
