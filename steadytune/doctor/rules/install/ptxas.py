"""A ptxas older than the code handed to it: the PTX assembler of one CUDA toolkit, found beside a compiler (Triton,
XLA) that generates PTX for a newer one. Triton writes PTX at the ISA version it maps the CUDA release to and refuses
nothing itself, so an older ptxas stops with "Unsupported .version"; XLA takes the first ptxas on PATH and, where that
one predates the GPU, falls back to the driver's JIT, which then cannot load the PTX. Both are two CUDA toolkits mixed
in one environment, not a GPU missing from a build: the fix is the one ptxas that matches."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.cuda_builds import _NVCC_FIRST
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


# the CUDA release whose ptxas first reads a PTX ISA version (NVIDIA's PTX ISA release notes, "PTX ISA Version" table)
_PTX_ISA_CUDA = {"5.0": "8.0", "6.0": "9.0", "6.1": "9.1", "6.2": "9.2", "6.3": "10.0", "6.4": "10.1", "6.5": "10.2",
                 "7.0": "11.0", "7.1": "11.1", "7.2": "11.2", "7.3": "11.3", "7.4": "11.4", "7.5": "11.5",
                 "7.6": "11.6", "7.7": "11.7", "7.8": "11.8", "8.0": "12.0", "8.1": "12.1", "8.2": "12.2",
                 "8.3": "12.3", "8.4": "12.4", "8.5": "12.5", "8.6": "12.7", "8.7": "12.8", "8.8": "12.9",
                 "9.0": "13.0"}

# ptxas: "fatal   : Unsupported .version 8.6; current version is '8.5'"
_UNSUPPORTED_ISA = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '?(\d+\.\d+)")
# XLA: "ptxas does not support CC 8.9", "Used ptxas at /usr/local/cuda-12.2/bin/ptxas"
_XLA_PTXAS = re.compile(r"ptxas does not support CC (\d+)\.(\d+)")
_USED_AT = re.compile(r"Used ptxas at (\S+)")


@rule("wheel-platform")
def ptxas_older_than_the_ptx(ctx: Context) -> Optional[Diagnosis]:
    """ptxas refusing the PTX ISA version it was given: the compiler made PTX for a newer CUDA than this ptxas's."""
    lines = _lines_matching(ctx, _UNSUPPORTED_ISA.pattern) if "Unsupported .version" in _text(ctx) else []
    if not lines:
        return None
    made, knows = _UNSUPPORTED_ISA.search(lines[0].line).groups()
    cuda = _PTX_ISA_CUDA.get(made)
    newer = f"CUDA {cuda} or newer" if cuda else "a newer CUDA"
    cause = (f"the PTX handed to ptxas is ISA {made}, and this ptxas reads up to ISA {knows}"
             + (f" (CUDA {_PTX_ISA_CUDA[knows]}'s)" if knows in _PTX_ISA_CUDA else ""))
    if re.search(r"(?i)\btriton\b", _text(ctx)):
        return _make("wheel-platform", "Triton writes PTX newer than the ptxas it runs",
                     cause + ": the triton release maps this CUDA to a PTX version its ptxas does not accept",
                     "upgrade triton to a release that maps each CUDA release to the PTX version its ptxas reads "
                     "(pip install -U triton, or the torch release that pins it), or point Triton at a ptxas that "
                     f"reads PTX {made}: export TRITON_PTXAS_PATH=/usr/local/cuda-<{newer}>/bin/ptxas",
                     [ctx.line_fact(lines[0])], lines[:1])
    return _make("wheel-platform", "PTX newer than this ptxas", cause,
                 f"put the ptxas of {newer} first on PATH (which -a ptxas; ptxas --version shows them), or install "
                 "the release of the compiling package built for this CUDA", [ctx.line_fact(lines[0])], lines[:1])


@rule("wheel-platform")
def stale_ptxas_on_path(ctx: Context) -> Optional[Diagnosis]:
    """XLA (jax, TensorFlow) compiling with a ptxas that predates the GPU: the first ptxas on PATH belongs to an older
    CUDA toolkit than the one the framework's wheels bring (nvidia-cuda-nvcc-cu12)."""
    lines = _lines_matching(ctx, _XLA_PTXAS.pattern) if "ptxas does not support" in _text(ctx) else []
    if not lines:
        return None
    major, minor = _XLA_PTXAS.search(lines[0].line).groups()
    used = _USED_AT.search(_text(ctx))
    where = used.group(1) if used else "ptxas"
    found = f"the first ptxas on PATH ({where})" if "/" not in where else f"the ptxas at {where}"
    needs = _NVCC_FIRST.get(f"{major}{minor}", "a newer CUDA toolkit")
    jax = re.search(r"(?i)\bjax(?:lib)?\b", _text(ctx))
    return _make("wheel-platform", f"a ptxas older than compute capability {major}.{minor} (CC {major}.{minor})",
                 f"XLA compiled with {found}, which predates compute capability {major}.{minor} ({needs} or newer "
                 "knows it): an older CUDA toolkit on PATH shadows the one the framework was installed with, and "
                 "the driver's fallback then cannot load the PTX",
                 (f"take {where} off the search: " if "/" in where else "")
                 + "remove the old CUDA toolkits from PATH (which -a ptxas lists them; "
                 "keep one whose ptxas --version "
                 f"is {needs.split(' (')[0]}+, which knows CC {major}.{minor}), or put the ptxas of the pip package "
                 "nvidia-cuda-nvcc-cu12 first"
                 + ("; pip install -U \"jax[cuda12]\" installs a matching ptxas" if jax else ""),
                 [ctx.line_fact(lines[0])], lines[:1])


# XLA (JAX, TensorFlow) cannot run ptxas at all: "Couldn't invoke ptxas --version", "Failed to launch ptxas",
# "Can't find ptxas binary", "ptxas: not found" (xla/stream_executor/cuda/ptx_compiler / asm_compiler's words)
_PTXAS_ABSENT = re.compile(r"(?i)Couldn'?t invoke ptxas|Failed to launch ptxas|Can'?t find ptxas binary|"
                           r"\bptxas\b\W{0,3}(?:command )?not found|Couldn'?t get ptxas version")


@rule("rocm-libs-missing")
def ptxas_not_found(ctx: Context) -> Optional[Diagnosis]:
    """XLA compiles its kernels by running the CUDA toolkit's ptxas, found on PATH (or under the CUDA folder XLA was
    told of); a process that cannot find it, a Jupyter kernel started without the shell's PATH among them, aborts.
    jax[cuda12] brings ptxas as pip's nvidia-cuda-nvcc-cu12 (JAX's installation guide, "pip installation: NVIDIA GPU")."""
    lines = _lines_matching(ctx, _PTXAS_ABSENT) if "ptxas" in _text(ctx).lower() else []
    if not lines or _lines_matching(ctx, _UNSUPPORTED_ISA) or _lines_matching(ctx, _XLA_PTXAS):
        return None
    jax = re.search(r"(?i)\bjax", _text(ctx))
    if not jax and re.search(r"(?i)triton", _text(ctx)):
        # Triton ships its own ptxas (triton/backends/nvidia/bin) and takes another through TRITON_PTXAS_PATH
        # (Triton's README, "Tips for building"; its install notes for torch.compile)
        return _make("rocm-libs-missing", "Triton cannot find its ptxas",
                     "Triton assembles its kernels with the ptxas it ships in triton/backends/nvidia/bin (or the one "
                     "TRITON_PTXAS_PATH names); that file is missing, so the Triton install is incomplete (a partial "
                     "download, a slimmed container layer) or the variable points nowhere",
                     "reinstall the triton that torch pins: pip install --force-reinstall --no-deps triton==$(python -c "
                     "\"import importlib.metadata as m; print(m.version('triton'))\"); or point it at a CUDA toolkit's "
                     "ptxas: export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (the toolkit must know this GPU)",
                     [ctx.line_fact(lines[0])], lines[:1])
    wheel = ('pip install -U "jax[cuda12]" (it brings ptxas in the nvidia-cuda-nvcc-cu12 wheel)' if jax else
             "pip install nvidia-cuda-nvcc-cu12 (ptxas in site-packages/nvidia/cuda_nvcc/bin)")
    return _make("rocm-libs-missing", "XLA cannot find ptxas",
                 "XLA compiles its GPU kernels with ptxas, the CUDA toolkit's PTX assembler, which it runs from PATH; "
                 "this process finds none (the toolkit is not installed, or its bin folder is not on the PATH the "
                 "process was started with, as in a notebook kernel launched outside that shell)",
                 "put the CUDA toolkit's bin folder on the PATH of the process that runs it: export PATH=/usr/local/"
                 "cuda/bin:$PATH (which ptxas must then answer; for Jupyter, set it where the kernel starts: in "
                 "os.environ['PATH'] before importing, or the kernel spec's env), or install ptxas: " + wheel,
                 [ctx.line_fact(lines[0])], lines[:1])
