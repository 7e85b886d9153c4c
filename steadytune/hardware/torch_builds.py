"""Which build of torch a version string names, and what a ROCm torch leaves behind when something replaces it.

A wheel says its platform in the local label of its version: `2.9.1+rocm6.4` (pytorch.org), `2.11.0+rocm7.13.0` or
`2.10.0a0+rocm7.10.0a20251120` (AMD's TheRock wheels), `2.9.0+rocmsdk20251116` (AMD's Windows wheels), `2.5.1+cu124`,
`2.13.0+cpu`. A version without a label comes from PyPI: a CUDA build on Linux x86_64, a CPU build elsewhere. When pip or
uv replaces a ROCm torch (a requirement that excludes its version, pypa/pip #12902, ROCm/bitsandbytes #37,
unslothai/unsloth #7275), the packages installed with it stay: torchvision and torchaudio with the same `+rocm` label
(torchvision 0.N goes with torch 2.(N-15), torchaudio 2.N with torch 2.N), and packages only a ROCm torch brings
(pytorch-triton-rocm; TheRock's rocm / rocm-sdk-* runtime wheels). They tell which torch was there before.

Nothing here imports torch.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.hardware.gpu_facts import WHEELS

# Installed only beside a ROCm torch: the Triton fork pytorch.org's ROCm torch requires, and TheRock's ROCm runtime.
ROCM_ONLY_PACKAGES = ("pytorch-triton-rocm", "rocm", "rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-devel")


def local_label(version: str) -> str:
    return version.split("+", 1)[1] if "+" in version else ""


def torch_build(version: str) -> str:
    """'rocm' | 'cuda' | 'cpu' | 'xpu' | 'pypi' (no label: PyPI's default build) for a torch-family version string."""
    label = local_label(version).lower()
    if label.startswith("rocm"):
        return "rocm"
    if re.match(r"cu\d", label):
        return "cuda"
    if label.startswith("cpu"):
        return "cpu"
    if label.startswith("xpu"):
        return "xpu"
    return "pypi" if not label else label


def describe_build(version: str, platform: Optional[str] = None) -> str:
    """A short phrase for the build; `platform` (sys.platform of the machine, when it is this one) makes PyPI's
    default exact."""
    build = torch_build(version)
    if build == "pypi":
        if platform is None:
            return "PyPI's default build: CUDA on Linux x86_64, CPU on Windows and macOS"
        return "PyPI's default build, " + ("a CUDA build" if platform.startswith("linux") else "a CPU build") + " here"
    return {"rocm": "a ROCm build", "cuda": "a CUDA build", "cpu": "a CPU build", "xpu": "an Intel XPU build"}.get(
        build, f"a '+{build}' build")


def is_prerelease(version: str) -> bool:
    """2.4.0.dev20240520, 2.11.0a0, 2.12.0rc1: a requirement without --pre may not accept it (pypa/pip #12902)."""
    return bool(re.search(r"(a|b|rc|\.dev)\d*", version.split("+", 1)[0]))


def torch_version_of(package: str, version: str) -> Optional[str]:
    """The torch version a torchvision / torchaudio release was built for, with its local label; None otherwise.
    torchvision 0.26.0+rocm7.13.0 -> 2.11.0+rocm7.13.0 (0.N pairs with 2.(N-15)); torchaudio 2.11.0+x -> 2.11.0+x."""
    label = local_label(version)
    public = version.split("+", 1)[0]
    suffix = f"+{label}" if label else ""
    if package == "torchaudio" and public.startswith("2."):
        return public + suffix
    match = re.match(r"0\.(\d+)\.(\d+)(.*)$", public)
    if package == "torchvision" and match and int(match.group(1)) >= 15:
        return f"2.{int(match.group(1)) - 15}.{match.group(2)}{match.group(3)}{suffix}"
    return None


def index_for_label(label: str) -> Optional[str]:
    """The pytorch.org index a `+rocmX.Y` label comes from (stable or nightly), when it is one of theirs."""
    match = re.fullmatch(r"rocm(\d+\.\d+(?:\.\d+)?)", label)
    if not match:
        return None
    names = {w.name for w in WHEELS}
    if f"pytorch.org rocm{match.group(1)}" in names:
        return f"https://download.pytorch.org/whl/rocm{match.group(1)}"
    return None


def reinstall_line(version: str) -> str:
    """The pip line that puts this exact ROCm torch back, where its index is known; else the pinned requirement."""
    label = local_label(version)
    index = index_for_label(label)
    pre = "--pre " if is_prerelease(version) else ""
    if index and ".dev" in version:
        index = index.replace("/whl/", "/whl/nightly/")
    if index:
        return f"pip install {pre}--force-reinstall --no-deps \"torch=={version}\" --index-url {index}"
    return (f"pip install {pre}--force-reinstall --no-deps \"torch=={version}\" --index-url <the index it came from: "
            "AMD's TheRock wheels are on https://rocm.nightlies.amd.com/whl-multi-arch/ or repo.amd.com>")


def wheel_archs_of(version: Optional[str]) -> Optional[frozenset[str]]:
    """The gfx targets compiled into a pytorch.org ROCm torch of this version (its index's list in gpu_facts.WHEELS);
    None for other builds, whose list is not in the table."""
    match = re.fullmatch(r"rocm(\d+\.\d+(?:\.\d+)?)", local_label(version or ""))
    if not match:
        return None
    for wheel in WHEELS:
        if wheel.name == f"pytorch.org rocm{match.group(1)}":
            return wheel.archs
    return None
