"""The driver refusing PTX made by a newer CUDA: "the provided PTX was compiled with an unsupported toolchain"
(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222), or the driver's own JIT ("ptxas application ptx input", a numba link through
cuLinkAddData) saying "Unsupported .version". PTX is compiled for the GPU by the driver when the program runs, and a
driver reads only the PTX of its own CUDA release or older, so the fix is a driver for that CUDA, or the toolkit /
container of the driver's CUDA. It reads the CUDA that made the PTX from the paste's values (the PTX ISA version, an
NGC container's release, a program's image, a conda cudatoolkit, a torch build) and the driver's from nvidia-smi.

Sources: NVIDIA's CUDA compatibility guide (PTX JIT needs a driver at least as new as the toolkit that made the PTX);
the PTX ISA release notes (ISA version per CUDA release, in install/ptxas.py); the NGC frameworks support matrix (the
CUDA of each monthly container release); fauxpilot's docker-compose and Dockerfile (moyix/triton_with_ft:22.06, later
22.09)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.driver import _DRIVER_FOR_CUDA
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text
from steadytune.doctor.rules.install.ptxas import _PTX_ISA_CUDA


_REFUSED = re.compile(r"(?i)PTX was compiled with an unsupported toolchain|UNSUPPORTED_PTX_VERSION|"
                      r"cudaErrorUnsupportedPtxVersion|\b(?:error|code|err)\W{0,3}222\b|"
                      # a user's own words for the same refusal ("tests fail with a PTX version mismatch")
                      r"\bPTX (?:ISA )?version mismatch")
# the driver's JIT assembler (an in-memory PTX: "ptxas application ptx input"), refusing an ISA newer than its own
_JIT_ISA = re.compile(r"ptxas application ptx input.{0,60}Unsupported \.version (\d+\.\d+); current version is "
                      r"'?(\d+\.\d+)")
_ISA = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '?(\d+\.\d+)")
_LINKER = re.compile(r"(?i)cuLink(?:AddData|Complete|Create)\w*|LinkerError|ptxas application ptx input")

# The CUDA of NGC's monthly container releases (tritonserver, pytorch, tensorflow, tensorrt share it), from the first
# release of each CUDA (NGC's frameworks support matrix); an image built on one (moyix/triton_with_ft) has its CUDA
_NGC_CUDA = (("21.01", (11, 2)), ("21.04", (11, 3)), ("21.07", (11, 4)), ("21.11", (11, 5)), ("22.01", (11, 6)),
             ("22.05", (11, 7)), ("22.09", (11, 8)), ("23.01", (12, 0)), ("23.03", (12, 1)), ("23.08", (12, 2)),
             ("23.11", (12, 3)), ("24.03", (12, 4)), ("24.06", (12, 5)), ("24.08", (12, 6)), ("25.01", (12, 8)),
             ("25.04", (12, 9)), ("25.08", (13, 0)))
_NGC_TAG = re.compile(r"(?i)(?:nvcr\.io/nvidia/[\w-]+|triton_with_ft|tritonserver|nvidia/pytorch|nvidia/tensorrt)"
                      r":(\d{2}\.\d{2})")
# programs that ship as an image built on an NGC release, when the paste names the program but not the tag
# (FasterTransformer's Triton backend, its "[FT][ERROR]" lines and build paths, is what fauxpilot's image runs; a compose
# log's service column, which names fauxpilot, is gone once the log prefix is read off)
_PROGRAM_IMAGES = {"fauxpilot": ("moyix/triton_with_ft:22.06", "moyix/triton_with_ft:22.09")}
_PROGRAM = re.compile(r"(?i)\bfauxpilot\b|\[FT\]\[(?:ERROR|WARNING|INFO)\]|fastertransformer_backend")
# conda's cudatoolkit releases (defaults and conda-forge): a numba user keeps the driver and takes the newest one it runs
# The exact oldest Linux x86_64 driver of each CUDA minor's GA release, where the release notes' table ("CUDA Toolkit
# and Corresponding Driver Versions", as copied on blog.csdn.net/ytomc/article/details/122805982 for 9.0-11.6; the
# 12.6.3 and 13.0.0 manifests of vector-lens name 560.28.03 and 580.65.06) was read; other minors keep the branch only.
# Checked v20: every value below matches the GA row of a copy of the CUDA 13.2 Update 2 release notes' Table 3
# (docs.nvidia.com/cuda/cuda-toolkit-release-notes, Linux x86_64 column; 11.0 is its "11.0.2 GA" row, the 11.0.1 RC row
# reads 450.36.06)
_LEAST_LINUX_DRIVER = {(9, 0): "384.81", (9, 1): "390.46", (9, 2): "396.26", (10, 0): "410.48", (10, 1): "418.39",
                       (10, 2): "440.33", (11, 0): "450.51.05", (11, 1): "455.23", (11, 2): "460.27.03",
                       (11, 3): "465.19.01", (11, 4): "470.42.01", (11, 5): "495.29.05", (11, 6): "510.39.01",
                       (12, 6): "560.28.03", (13, 0): "580.65.06"}
# The last update of a CUDA minor (the same release-notes table for 11.0-11.5: "11.0.3 Update 1" ... "11.5 Update 2";
# NVIDIA's release-notes archive for 12.1.1, 12.4.1, 12.5.1, 12.6.3): the toolkit to take when the driver is kept
# (checked v18b against the CUDA 13.1 release notes' driver table: 12.1 Update 1, 12.4 Update 1, 12.5 Update 1 and
# 12.6 Update 3 are the last rows of their minors; 12.6 GA >=560.28.03 and 13.0 GA >=580.65.06 in the same table)
_LAST_UPDATE = {(11, 0): "11.0.3", (11, 1): "11.1.1", (11, 2): "11.2.2", (11, 3): "11.3.1", (11, 4): "11.4.4",
                (11, 5): "11.5.2", (12, 1): "12.1.1", (12, 4): "12.4.1", (12, 5): "12.5.1", (12, 6): "12.6.3"}
# Programs whose images name no CUDA in the paste: text-generation-inference's 1.x images are built on CUDA 11.8 (its
# maintainer in TGI#1026: "TGI is built on CUDA 11.8"); its 2.x images moved to CUDA 12, so a 2.x paste is left alone
# (checked v18b: huggingface/llm-swarm PR 5, the 1.1.1 image refused by nvidia-container-cli with "cuda>=11.8";
# TGI#2504, a 2024 source build compiled with CUDA 12.1)
_PROGRAM_CUDA = re.compile(r"(?i)text-generation-(?:launcher|inference|router|server)|\bTGI\b")
_PROGRAM_CUDA_2X = re.compile(r"(?i)(?:text-generation-inference|\bTGI\b)[:\s]*v?[2-9]\.\d")
_CONDA_TOOLKITS = ((8, 0), (9, 0), (9, 2), (10, 0), (10, 1), (10, 2), (11, 0), (11, 1), (11, 2), (11, 3), (11, 4),
                   (11, 5), (11, 6), (11, 7), (11, 8))


def _cuda(text: str) -> Optional[tuple[int, int]]:
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _ngc_cuda(release: str) -> Optional[tuple[int, int]]:
    return max(((r, c) for r, c in _NGC_CUDA if r <= release), default=(None, None))[1]


def _said(cuda: tuple[int, int]) -> str:
    return f"{cuda[0]}.{cuda[1]}"


def _made_with(ctx: Context, text: str) -> tuple[Optional[tuple[int, int]], str]:
    """The CUDA that made the PTX, and where that is read from."""
    isa = _ISA.search(text)
    if isa and isa.group(1) in _PTX_ISA_CUDA:
        return _cuda(_PTX_ISA_CUDA[isa.group(1)]), f"its PTX is ISA {isa.group(1)}"
    tag = _NGC_TAG.search(text)
    if tag and _ngc_cuda(tag.group(1)):
        return _ngc_cuda(tag.group(1)), f"the image {tag.group(0)} is built with it"
    program = _PROGRAM.search(text)
    if program:
        images = _PROGRAM_IMAGES["fauxpilot"]
        cudas = [(image, _ngc_cuda(image.rsplit(":", 1)[1])) for image in images]
        return cudas[0][1], "fauxpilot's FasterTransformer image " + ", later ".join(
            f"{image} (CUDA {_said(c)})" for image, c in cudas) + " is built with it"
    toolkit = re.search(r"(?i)\bcudatoolkit\W{0,3}(\d+\.\d+)|\bcuda-version\W{0,3}(\d+\.\d+)|\bCUDA (?:toolkit:? ?)?"
                        r"(\d+\.\d+)(?!\.\d{3})|release (\d+\.\d+), V\d", text)
    torch = [f.value.split("+cu", 1)[1] for f in ctx.sheet.of("torch") if "+cu" in f.value]
    if toolkit:
        return _cuda(next(g for g in toolkit.groups() if g)), "the toolkit named builds with it"
    if torch and torch[-1][:3].isdigit():
        return (int(torch[-1][:2]), int(torch[-1][2:3])), f"the torch build is +cu{torch[-1]}"
    if _PROGRAM_CUDA.search(text) and not _PROGRAM_CUDA_2X.search(text):
        return (11, 8), "text-generation-inference's 1.x images are built on CUDA 11.8"
    return None, ""


def _driver_runs(text: str) -> tuple[Optional[tuple[int, int]], Optional[int]]:
    """The newest CUDA the driver runs (nvidia-smi's CUDA Version, else its branch, else its JIT's ISA), and its branch."""
    # nvidia-smi's header, or the user's words for it ("my GPU's CUDA (11.6)", "the driver supports CUDA 11.4")
    said = re.search(r"CUDA Version:?\s*(\d+\.\d+)|(?i:\b(?:GPU'?s|driver'?s|nvidia-smi'?s?) CUDA\b(?: version)?\W{0,3}"
                     r"(\d+\.\d+)|\bdriver (?:only )?supports? (?:up to )?CUDA\W{0,3}(\d+\.\d+))", text)
    branch = re.search(r"(?i)Driver Version:?\s*(\d{3})\.|NVIDIA-SMI (\d{3})\.\d+|\bnvidia-driver-(\d{3})\b|"
                       r"\bdriver (?:version )?(\d{3})\.\d+", text)
    number = int(next(g for g in branch.groups() if g)) if branch else None
    if said:
        return _cuda(next(g for g in said.groups() if g)), number
    if number:
        return max((c for c, b in _DRIVER_FOR_CUDA if b <= number), default=None), number
    jit = _JIT_ISA.search(text)
    if jit and jit.group(2) in _PTX_ISA_CUDA:
        return _cuda(_PTX_ISA_CUDA[jit.group(2)]), None
    return None, None


def _keep_the_driver(ctx: Context, text: str, runs: tuple[int, int]) -> str:
    """The way to the driver's CUDA for what made the PTX: a conda toolkit (numba), an older container, a torch build."""
    tag = _NGC_TAG.search(text)
    # numba's own error format ("Call to cuLinkAddData results in ...", its LinkerError) names it where nothing else does
    if re.search(r"(?i)\bnumba|\bcudatoolkit\b|\bconda\b|\bLinkerError\b|Call to cu\w+ results in", text):
        if runs[0] <= 11:
            conda = max((c for c in _CONDA_TOOLKITS if c <= runs), default=None)
            if conda:
                return f"conda install cudatoolkit={_said(conda)} (the newest conda cudatoolkit this driver runs)"
        return f"conda install -c conda-forge \"cuda-version={_said(runs)}\" cuda-nvcc cuda-nvrtc"
    if tag or _PROGRAM.search(text):
        release = max((r for r, c in _NGC_CUDA if c <= runs), default=None)
        return (f"an image built for CUDA {_said(runs)} or older (NGC release {release} or earlier)" if release else
                f"an image built for CUDA {_said(runs)} or older")
    if ctx.sheet.of("torch"):
        label = "cu118" if runs < (12, 1) else "cu121" if runs < (12, 4) else "cu124" if runs < (12, 6) else \
            "cu126" if runs < (12, 8) else "cu128"
        return f"pip install torch --index-url https://download.pytorch.org/whl/{label}"
    # nothing in the paste made the PTX newer than the driver (an image of the driver's own CUDA, say): the program's
    # runtime compiler did, from a toolkit of its own environment, which for OpenMM, numba and CuPy is conda's
    # (openmm#3585: conda install -c conda-forge cudatoolkit=11.6 under driver 510)
    last = f" ({_LAST_UPDATE[runs]}, its last update)" if runs in _LAST_UPDATE else ""
    return (f"the CUDA {_said(runs)} toolkit{last} (and builds made with it); a program that compiles its kernels when it "
            "runs (OpenMM, numba, CuPy) takes the toolkit of its conda environment: conda list | grep -E "
            f"'cudatoolkit|cuda-version|nvrtc', then {_conda_for(runs)}")


def _conda_for(runs: tuple[int, int]) -> str:
    """The conda install of the toolkit the driver runs: cudatoolkit up to CUDA 11.8, the cuda-version metapackage from
    CUDA 12 (conda-forge's split CUDA packages)."""
    if runs[0] <= 11:
        conda = max((c for c in _CONDA_TOOLKITS if c <= runs), default=None)
        if conda:
            return f"conda install -c conda-forge cudatoolkit={_said(conda)}"
    return f"conda install -c conda-forge \"cuda-version={_said(runs)}\" cuda-nvrtc"


# numba's link step (its LinkerError, "Call to cuLinkAddData results in", a numba path in the frames)
_NUMBA = re.compile(r"(?i)\bnumba(?:[_-]cuda)?\b|Call to cuLink\w* results in|\bLinkerError\b")


def _numba_mvc(text: str, made: Optional[tuple[int, int]], runs: Optional[tuple[int, int]]) -> Optional[str]:
    """numba on CUDA 12 links through pynvjitlink, which brings CUDA Minor Version Compatibility: a 12.x toolkit's PTX
    runs under any 12.x driver without a driver update (numba's "CUDA Minor Version Compatibility" page: pip install
    --extra-index-url https://pypi.nvidia.com pynvjitlink-cu12 on Linux, not on Windows; numba-cuda's
    cudadrv/nvjitlink setup reads config.CUDA_ENABLE_PYNVJITLINK, then NUMBA_CUDA_ENABLE_PYNVJITLINK). Only where both
    the toolkit and the driver are (or may be) CUDA 12: across a major release only the driver helps."""
    if not _NUMBA.search(text) or (made and made[0] != 12) or (runs and runs[0] != 12):
        return None
    return ("keep the driver and let numba link through nvJitLink (CUDA minor version compatibility, Linux): in the "
            "Python the job really runs (which python in the job script), pip install numba-cuda pynvjitlink-cu12 "
            "(--extra-index-url https://pypi.nvidia.com where pip finds no pynvjitlink-cu12), then "
            "export NUMBA_CUDA_ENABLE_PYNVJITLINK=1 (or from numba import config; config.CUDA_ENABLE_PYNVJITLINK = True "
            "before the first kernel); an error that still reads the old ptxas version comes from another environment "
            "than the one you installed into")


@rule("driver")
def ptx_newer_than_the_driver(ctx: Context) -> Optional[Diagnosis]:
    """The driver's JIT refusing PTX from a newer CUDA: the driver's age, not the GPU's architecture."""
    text = _text(ctx)
    refused = _lines_matching(ctx, _REFUSED)
    jit = _lines_matching(ctx, _ISA) if _LINKER.search(text) else []
    if not refused and not jit:
        return None
    made, source = _made_with(ctx, text)
    runs, branch = _driver_runs(text)
    if made and runs and made <= runs and not refused:
        return None   # the driver runs that CUDA: another reading (a ptxas of the toolkit)
    least = next((b for c, b in _DRIVER_FOR_CUDA if made and c >= made), None)
    driver = f"driver {branch}" if branch else "the NVIDIA driver"
    runs_said = f" (it runs CUDA {_said(runs)} at most)" if runs else ""
    cause = (f"the PTX was made by CUDA {_said(made)} ({source}), and {driver}{runs_said} reads only the PTX of its own "
             "CUDA release or older" if made else
             f"the PTX was made by a newer CUDA than {driver}{runs_said} reads: a driver JIT-compiles only the PTX of "
             "its own CUDA release or older")
    exact = _LEAST_LINUX_DRIVER.get(made) if made else None
    oldest = f" ({exact} at least on Linux)" if exact else ""
    update = (f"update the NVIDIA driver to {least} or newer{oldest}, which runs CUDA {_said(made)} (sudo apt install "
              f"nvidia-driver-{least} or a later branch, then reboot; Windows: the current Game Ready / Studio driver; "
              f"on the host of a container, not inside it); nvidia-smi's 'CUDA Version' must then read {_said(made)} "
              "or higher" if made and least else
              "update the NVIDIA driver (on the host of a container, not inside it) until nvidia-smi's 'CUDA Version' "
              "is at least the CUDA the program was built with")
    keep = f"; or keep {driver} and use {_keep_the_driver(ctx, text, runs)}" if runs else ""
    mvc = _numba_mvc(text, made, runs)
    if mvc:
        update, keep = mvc, f"; or {update}" + keep
    return _make("driver", f"the NVIDIA driver is older than the CUDA that made the PTX"
                 + (f" ({_said(made)})" if made else ""),
                 cause + " (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)", update + keep, [], refused or jit)
