"""A tool whose GPU path exists for one vendor only, asked to use a GPU on a machine without that vendor's card (a Mac,
an Intel GPU; an AMD GPU where the tool has a ROCm build since gets that build): no install, build or setting brings a
GPU path, so the tool's CPU mode (or another tool) is
the fix. A table of tool x the only GPU platform it has."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, rule, _text


@dataclass(frozen=True)
class OnlyOn:
    tool: str        # as the fix names it
    named: str       # how a paste names it
    gpu: str         # the one GPU platform it has
    cpu_fix: str     # its own CPU mode
    source: str
    amd: str = ""    # where an AMD build of it exists since, that build (a wrong build, not a missing GPU path)


ONLY_ON: tuple[OnlyOn, ...] = (
    OnlyOn("CTranslate2 (faster-whisper's engine)", r"(?i)ctranslate2|faster[-_ ]whisper|whisperx", "NVIDIA GPUs through CUDA (its "
           "Linux and Windows x86-64 wheels) and, since 4.7.1, AMD GPUs through ROCm",
           "device=\"cpu\" with compute_type=\"int8\" (WhisperModel(..., device=\"cpu\", compute_type=\"int8\"))",
           "CTranslate2 docs, hardware support: NVIDIA GPUs (CUDA); the macOS wheels are CPU-only (Apple Accelerate)",
           "CTranslate2 4.7.1 and newer publish ROCm builds with their GitHub releases (OpenNMT/CTranslate2 PR 1989, "
           "built for ROCm 7.x): install that wheel in the environment (the CTranslate2-rocm fork, "
           "arlo-phoenix/CTranslate2-rocm, for an older ROCm) instead of PyPI's CUDA one"),
)

# a Mac in the user's words or its tools' ("MacBook Pro", "macOS 14", "M2 Max", "Apple Silicon")
_MAC = re.compile(r"(?i)\bmac ?book\b|\bmac ?os\b|\bmac mini\b|\bimac\b|\bapple (?:silicon|m[1-4])\b|\bM[1-4] (?:Pro|Max|Ultra)\b|"
                  r"\bdarwin\b|\bmps\b")
# the GPU wanted: a CUDA device asked for, or the tool's own "not compiled with CUDA" refusal, or a question
_WANTS_GPU = re.compile(r"(?i)not compiled with CUDA|device ?= ?['\"]?cuda|\bcuda\b|\bgpu\b")


@rule("gpu-unsupported")
def gpu_path_of_another_vendor(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    row = next((r for r in ONLY_ON if re.search(r.named, text)), None)
    if row is None:
        return _mac_asked(ctx)
    if any(e.family not in (None, "torch-build", "gpu-unsupported") for e in ctx.errors):
        return None
    nvidia = [g for g in ctx.sheet.of("gpu") if (g.detail or "").startswith("sm_")]
    amd = [g for g in ctx.sheet.of("gpu") if (g.detail or "").startswith("gfx")]
    other = [g for g in ctx.sheet.of("gpu") if re.search(r"(?i)\bintel\b|\barc\b", g.value)]
    mac = ctx.sheet.has("os", "macos") or _MAC.search(text)
    asked = _asked_about_amd(ctx, row, text) if not (nvidia or amd or mac or other) else None
    if asked is not None:
        return asked
    if nvidia or not (mac or other or amd):
        return None
    wants = _lines_matching(ctx, _WANTS_GPU.pattern)[:1]
    if not wants:
        return None
    if amd and not (row.amd or other or mac):
        return None
    if amd and row.amd and not mac:
        # a vendor build that exists now: the wrong build of the tool is installed, the install readings' family
        return _make("torch-build", f"{row.tool.split(' (')[0]} is a CUDA build on an AMD GPU",
                     f"{row.tool}'s PyPI wheels carry only {row.gpu}; the {amd[0].value} needs its ROCm build",
                     row.amd, amd[:1], wants)
    machine = f"the {other[0].value}" if other and not mac else "a Mac (macOS)"
    # a Mac's GPU is reached through Metal (torch's MPS) only: say that the tool has no Metal backend, the question
    # such users ask ("does it use the M1 GPU?"), and name the engines that have one
    metal = ("; it has no Metal (MPS) backend, so an Apple GPU is never used; a Metal-capable engine (whisper.cpp, "
             "MLX) uses it" if mac and not other else "")
    diagnosis = _make("gpu-unsupported", f"{row.tool.split(' (')[0]} has no GPU path on {machine}",
                      f"{row.tool} runs on GPUs only as {row.gpu}; {machine} has no such GPU, so no install or "
                      "setting gives it one", f"{row.tool} cannot use {machine} as a GPU (its GPU path is "
                      f"{row.gpu} only{metal}): run it on the CPU, {row.cpu_fix}; for a GPU, an NVIDIA card on "
                      f"Linux or Windows ({row.source})", other[:1], wants)
    # a reinstall of the CUDA wheel (the install readings) cannot help a machine without the card
    return _ahead_of(diagnosis, "torch-build")


# an AMD GPU asked about in words ("does it support AMD GPUs?", "build steps for ROCm"), no card of either vendor shown
_AMD_ASKED = re.compile(r"(?i)\b(?:support|run|work|use|install|build)\w*\b.{0,40}\b(?:AMD|ROCm|Radeon|HIP)\b|"
                        r"\b(?:AMD|ROCm|Radeon)\b.{0,40}\b(?:support\w*|possible|work\w*)\b")


def _asked_about_amd(ctx: Context, row: OnlyOn, text: str) -> Optional[Diagnosis]:
    """Whether the tool runs on AMD GPUs, asked before any install: the stock packages have only the one vendor's GPU
    path; where a ROCm build exists since, that build is the way (said with the answer)."""
    said = _lines_matching(ctx, _AMD_ASKED)
    if not said or ctx.errors:
        return None
    diagnosis = _make("gpu-unsupported", f"{row.tool.split(' (')[0]}'s packages have no AMD GPU path",
                 f"{row.tool} runs on GPUs as {row.gpu}; the packages pip installs by default are the CUDA ones, so "
                 "an AMD GPU is not used by them",
                 f"{row.tool} does not support AMD GPUs in its default packages (pip's wheels are CUDA-only); "
                 + (f"on an AMD GPU under Linux: {row.amd}" if row.amd else f"run it on the CPU, {row.cpu_fix}")
                 + f" ({row.source})", [], said[:1], confirmed=False)
    # the tool has its own engine: torch's ROCm build (the install readings' answer to an AMD question) is not its path
    return _ahead_of(diagnosis, "torch-build")


# a short ask for macOS itself: "macOS M series support", "any plan to support pip install on macos?"
_MAC_ASKED = re.compile(r"(?i)\b(?:support\w*|plans?|wheels?)\b[^\n]{0,40}\bmac ?os\b|"
                        r"\bmac ?os\b[^\n]{0,40}\bsupport\w*\b")


def _mac_asked(ctx: Context) -> Optional[Diagnosis]:
    """A thin ask, in a GPU tool's tracker, for macOS support, naming no tool of the table: the GPU paths such tools
    are built on (CUDA, ROCm) do not exist on macOS, whose only GPU API is Apple's Metal."""
    # short, and no error line of a known class (a log's unrecognised lines are words)
    if any(e.family is not None for e in ctx.errors) or sum(1 for line in ctx.sheet.lines if line.strip()) > 15 or \
            ctx.tool() is not None:
        return None
    asked = _lines_matching(ctx, _MAC_ASKED.pattern)[:1]
    if not asked or any((g.detail or "")[:3] in ("sm_", "gfx") for g in ctx.sheet.of("gpu")):
        return None
    return _make("gpu-unsupported", "no CUDA or ROCm GPU path on macOS",
                 "a tool whose GPU backends are CUDA and ROCm has nothing to run on a Mac: neither exists on macOS "
                 "(Apple's GPUs are reached through Metal only)",
                 "there is no macOS GPU support to install: run the tool's CPU path on the Mac, use a "
                 "Metal/MPS-backed alternative where one exists (PyTorch's device=\"mps\", llama.cpp's Metal build), "
                 "or run on a Linux machine with an NVIDIA or AMD GPU", ctx.sheet.of("os")[:1], asked,
                 confirmed=False)
