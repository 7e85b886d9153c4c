"""What the CUDA side of a missing arch reads (no rules): the toolkit that first knows each compute capability, the
CUDA a torch or its companions were built for, wheels that cannot carry the GPU, xformers and ptxas refusing it,
Kepler and Jetson GPUs, and a toolkit newer than the driver."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import ErrorLine
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor


# The CUDA toolkit that first knows each compute capability (NVIDIA's CUDA release notes)
_NVCC_FIRST = {"70": "CUDA 9.0", "75": "CUDA 10.0", "80": "CUDA 11.0", "86": "CUDA 11.1", "87": "CUDA 11.4",
               "89": "CUDA 11.8 (or CUDA 12.x)", "90": "CUDA 11.8 (or CUDA 12.x)", "100": "CUDA 12.8",
               "101": "CUDA 12.8", "120": "CUDA 12.8", "103": "CUDA 12.9", "121": "CUDA 12.9", "110": "CUDA 13.0"}
# The oldest compute capability each CUDA major still compiles (NVIDIA's CUDA release notes: CUDA 11 dropped sm_30,
# CUDA 12 dropped sm_35 and sm_37)
_NVCC_OLDEST = {11: 35, 12: 50, 13: 75}


def _cuda_build(ctx: "Context") -> Optional[tuple[int, int]]:
    """The CUDA a torch of the paste was built for (+cu126 -> (12, 6))."""
    for fact in reversed(ctx.sheet.of("torch")):
        m = re.search(r"\+cu(\d{2,3})\b", fact.value)
        if m:
            digits = m.group(1)
            return int(digits[:-1]), int(digits[-1])
    # no version shown, the build said as a package ("uv installs torch+cu128"): the last one the paste names
    named = re.findall(r"\btorch\+cu(\d{2,3})\b", "\n".join(ctx.sheet.lines))
    if named:
        return int(named[-1][:-1]), int(named[-1][-1])
    return None


def _blackwell_build(ctx: "Context") -> Optional[str]:
    """The CUDA (12.8 or newer) of the torch the paste installed: its +cuNNN tag or the index it came from
    (download.pytorch.org/whl/[nightly/]cu128)."""
    build = _cuda_build(ctx)
    if build and build >= (12, 8):
        return f"{build[0]}.{build[1]}"
    found = re.findall(r"download\.pytorch\.org/whl/(?:nightly/|test/)?cu(\d{2})(\d)\b", "\n".join(ctx.sheet.lines))
    index = [(int(a), int(b)) for a, b in found if (int(a), int(b)) >= (12, 8)]
    return f"{index[-1][0]}.{index[-1][1]}" if index else None


def _companion_build(ctx: "Context") -> Optional[tuple[str, tuple[int, int]]]:
    """torchvision / torchaudio with a +cuNNN tag of its own (pip list, collect_env): (name, its CUDA)."""
    found = re.search(r"\b(torchvision|torchaudio)[\s=:-]+[\d.]+\+cu(\d{2})(\d)\b", "\n".join(ctx.sheet.lines))
    return (found.group(1), (int(found.group(2)), int(found.group(3)))) if found else None


def _wheel_lacks(arch: Optional[str], ctx: "Context") -> bool:
    """The torch the paste shows cannot carry this NVIDIA GPU: Blackwell before CUDA 12.8, Maxwell/Pascal in the cu128
    and newer builds, Volta in the CUDA 13 ones, Jetson Thor's sm_110 before CUDA 13 (which named it)."""
    build = _cuda_build(ctx)
    if not arch or not arch.startswith("sm_") or build is None:
        return False
    cc = int(arch[3:])
    # Maxwell/Pascal: PyTorch 2.8 release notes, removed from the CUDA 12.8 and 12.9 builds (kept in cu126); CUDA 13
    # builds start at Turing, sm_75 (pytorch/pytorch#172352's matrix)
    return ((cc >= 100 and build < (12, 8)) or (cc < 70 and build >= (12, 8)) or (cc < 75 and build >= (13, 0))
            or (cc == 110 and build < (13, 0)))


def _xformers_lacks(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """An NVIDIA kernel missing where the paste runs xformers (--xformers, its wheel, its "built for sm75" check): the
    xformers binary, built for other GPUs or another torch, is what lacks it; torch itself is fine."""
    if not errors or "xformers" not in ctx.sheet.tools or _vendor(ctx) == "amd":
        return None
    said = " ".join(e.line for e in errors)
    if not re.search(r"(?i)no kernel image|but was built for sm", said):
        return None
    arch, where = ctx.arch(errors)
    cc = f"{arch[3:-1]}.{arch[-1]}" if arch and re.fullmatch(r"sm_\d+", arch) else "<the GPU's compute capability>"
    return _make("arch-missing", "xformers has no kernels for this GPU",
                 "the installed xformers binary was built for other GPUs (or another torch) than this one; torch's own "
                 "kernels are not the ones missing",
                 "pip uninstall -y xformers, then install the xformers wheel built for this torch (pip install -U xformers "
                 "--index-url https://download.pytorch.org/whl/<the torch's cuXXX>, or let the launcher reinstall it), or "
                 f"build it for this GPU: TORCH_CUDA_ARCH_LIST={cc} pip install -v -U "
                 "git+https://github.com/facebookresearch/xformers.git; meanwhile run without --xformers",
                 [where, ctx.line_fact(errors[0])], errors)


def _ptxas_lacks(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """ptxas refusing the GPU's target ("Value 'sm_121a' is not defined for option 'gpu-name'"): the assembler is older
    than the GPU. Triton ships its own ptxas inside the wheel; TRITON_PTXAS_PATH points it at a CUDA toolkit's
    newer one (Triton's README, environment variables), which is the fix where the toolkit knows the arch."""
    said = next((m for e in errors for m in [re.search(r"Value '(sm_(\d+))[af]?' is not defined for option "
                                                       r"'gpu-name'", e.line)] if m), None)
    if said is None:
        return None
    sm, cc = said.group(1), said.group(2)
    needs = _NVCC_FIRST.get(cc, "a newer CUDA toolkit")
    line = next(e for e in errors if said.group(0) in e.line)
    bundled = re.search(r"(?i)triton/backends/nvidia/bin/ptxas|PTXASError|triton", _text(ctx))
    if bundled:
        return _make("arch-missing", f"Triton's bundled ptxas does not know {sm}",
                     f"Triton compiles with the ptxas inside its wheel, which predates {sm}",
                     f"point Triton at a CUDA toolkit's ptxas that knows {sm} ({needs} or newer): export "
                     "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (the toolkit's path; `ptxas --version` there must "
                     f"be {needs.split(' (')[0]}+), or upgrade triton to a release whose bundled ptxas lists {sm}",
                     [ctx.line_fact(line)], errors)
    return _make("arch-missing", f"this ptxas does not know {sm}",
                 f"the CUDA toolkit's assembler predates compute capability {cc[:-1]}.{cc[-1]}",
                 f"{sm} needs {needs} or newer: install it and put its bin on PATH (CUDA_HOME pointing at it)",
                 [ctx.line_fact(line)], errors)


# The oldest compute capability in any current pytorch.org CUDA build (cu126: sm_50; CUDA 12 itself no longer
# compiles Kepler, NVIDIA's CUDA 12.0 release notes)
_OLDEST_TORCH_CC = 50


def _older_than_every_torch(ctx: Context, arch: Optional[str], where, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """A Kepler or older NVIDIA GPU under torch: no current wheel index carries it, so no index is the fix."""
    if not errors or not arch or not re.fullmatch(r"sm_\d+", arch) or int(arch[3:]) >= _OLDEST_TORCH_CC:
        return None
    tool = ctx.tool(errors)
    if tool not in (None, "torch", "torchvision", "torchaudio", "comfyui", "a1111", "unsloth", "llamafactory"):
        return None
    cc = f"{arch[3:-1]}.{arch[-1]}"
    if int(arch[3:]) < 35:   # CUDA 11.0 dropped sm_30/sm_32 (its release notes): no CUDA 11 source build either
        return _make("gpu-unsupported", f"{arch} is older than every torch build",
                     f"compute capability {cc} is below sm_35, the oldest arch any CUDA 11 or 12 toolkit compiles, "
                     "and PyTorch's binaries left compute capability 3.0 out from 0.4.1 on",
                     f"no torch build of recent years runs on compute capability {cc} ({arch}): run on the CPU "
                     "(device=\"cpu\"), or use a newer GPU (compute capability 5.0 or newer for the current CUDA "
                     "builds)", [where, ctx.line_fact(errors[0])], errors)
    return _make("gpu-unsupported", f"{arch} is older than every current torch build",
                 f"compute capability {cc} (Kepler or older) is below sm_50, the oldest arch in the current pytorch.org "
                 "CUDA builds, and CUDA 12 no longer compiles it",
                 f"no current torch wheel runs on it: run on the CPU (device=\"cpu\"), or build torch from source with "
                 f"CUDA 11.x and TORCH_CUDA_ARCH_LIST={cc}, or use an old torch release whose CUDA 11 build lists "
                 f"sm_{arch[3:]} (python -c 'import torch; print(torch.cuda.get_arch_list())' tells), or a newer GPU",
                 [where, ctx.line_fact(errors[0])], errors)


def _listed_cuda_archs(ctx: Context) -> set[str]:
    """The archs a torch says it carries: torch.cuda.get_arch_list()'s ['sm_50', ...] or its "supports CUDA capabilities
    sm_50 sm_60 ..." warning (three or more, so a sentence naming one arch is not a list)."""
    lines = ctx.sheet.lines
    for n, line in enumerate(lines):
        # the list on the line that says so, or printed on the line after the command
        said = "\n".join(lines[max(0, n - 1): n + 1])
        if re.search(r"(?i)get_arch_list|supports? CUDA capabilities|arch(?:itecture)?s?[ _]list", said):
            found = set(re.findall(r"\bsm_(\d{2,3})\b", line))
            if len(found) >= 3:
                return {f"sm_{n}" for n in found}
    return set()


# The oldest Linux driver branch of each CUDA toolkit (NVIDIA's CUDA Toolkit release notes, table "CUDA Toolkit and
# Minimum Required Driver Version"): code a toolkit compiles to PTX loads only on a driver at least this new. Checked
# v20 against a copy of the CUDA 13.2 Update 2 release notes' Table 3 "CUDA Toolkit and Corresponding Driver Versions":
# each branch is that of its minor's GA row, e.g. 11.8 GA >=520.61.05, 12.4 GA >=550.54.14, 12.8 GA >=570.26,
# 13.0 GA >=580.65.06 (12.7 has no row: there was no CUDA 12.7)
_CUDA_MIN_DRIVER = {(11, 0): 450, (11, 1): 455, (11, 2): 460, (11, 3): 465, (11, 4): 470, (11, 5): 495, (11, 6): 510,
                    (11, 7): 515, (11, 8): 520, (12, 0): 525, (12, 1): 530, (12, 2): 535, (12, 3): 545, (12, 4): 550,
                    (12, 5): 555, (12, 6): 560, (12, 8): 570, (12, 9): 575, (13, 0): 580}
# tools that compile their kernels at run time with the installed CUDA toolkit (XLA, Triton, Numba): their PTX needs a
# driver as new as that toolkit, or the driver reports "no kernel image" for GPU code that is really there
_JIT_TOOLS = ("jax", "tensorflow", "triton")


def _toolkit_newer_than_driver(ctx: Context, errors: list[ErrorLine]) -> Optional[Diagnosis]:
    """'no kernel image' from a run-time compiler (XLA, Triton) whose CUDA toolkit is newer than the driver: the PTX it
    writes is of a version the driver cannot load. Settled by the two versions the paste names."""
    if not any("no kernel image" in e.line for e in errors) or \
            not (ctx.tool(errors) in _JIT_TOOLS or any(t in ctx.sheet.tools for t in _JIT_TOOLS)):
        return None
    found = re.search(r"(?i)driver(?: version)?\s*(?:is|:|=)?\s*(\d{3})(?:\.\d+)*\b|\b(\d{3})\.\d{2,3}(?:\.\d+)? driver",
                      _text(ctx))
    driver = int(found.group(1) or found.group(2)) if found else None
    toolkits = sorted({tuple(int(x) for x in v.split(".")[:2]) for v in ctx.sheet.values("cuda")
                       if re.fullmatch(r"\d+\.\d+", v)} |
                      {(int(a), int(b)) for a, b in re.findall(r"(?i)\bCUDA(?: toolkit)?[ -]v?(1[1-3])\.(\d)\b", _text(ctx))})
    if driver is None or not toolkits:
        return None
    newest = toolkits[-1]
    needs = _CUDA_MIN_DRIVER.get(newest)
    if needs is None or driver >= needs:
        return None
    runs = [t for t in toolkits if _CUDA_MIN_DRIVER.get(t, 999) <= driver]
    older = f"CUDA {runs[-1][0]}.{runs[-1][1]}" if runs else "a CUDA toolkit of the driver's own version"
    return _make("driver", f"CUDA {newest[0]}.{newest[1]} is newer than the {driver} driver",
                 f"{ctx.tool(errors) or 'the run-time compiler'} builds its kernels with the CUDA {newest[0]}.{newest[1]} "
                 f"toolkit, whose PTX the NVIDIA {driver} driver cannot load (CUDA {newest[0]}.{newest[1]} needs driver "
                 f"{needs} or newer), so it reports no kernel image",
                 f"upgrade the NVIDIA driver to {needs} or newer, or use a CUDA toolkit the {driver} driver supports "
                 f"({older}) for this tool's CUDA libraries", [ctx.line_fact(errors[0])], errors)


def _no_cuda_said(ctx: Context) -> list[ErrorLine]:
    """torch saying it sees no GPU, in its words or the user's ("torch.cuda.is_available() returns False")."""
    return ctx.no_gpu() or _lines_matching(ctx, r"(?i)is_available\(\)\W*(?:returns?|is|gives|=+|->)?\W*False")[:1]


def _jetson(ctx: Context, arch: Optional[str]) -> bool:
    """A Jetson board: its integrated GPUs (sm_53, sm_62, sm_72, sm_87) are in no pytorch.org wheel, which are built
    for discrete GPUs; NVIDIA publishes torch for each JetPack. Jetson Thor (sm_110, JetPack 7) is an SBSA device:
    the pytorch.org cu130 aarch64 wheels carry it, so it is not one of these."""
    if arch == "sm_110":
        return False
    return arch in ("sm_53", "sm_62", "sm_72", "sm_87") or bool(re.search(r"(?i)\bJetson\b|\bJetPack\b|\bL4T\b",
                                                                          _text(ctx)))
