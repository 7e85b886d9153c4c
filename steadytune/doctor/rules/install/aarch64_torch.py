"""torch with CUDA on a Linux ARM server (aarch64 / arm64 / SBSA: Grace, GH200, GB200, Ampere Altra with an NVIDIA
card): PyPI's aarch64 torch wheels are CPU-only, so `pip install torch` gives a torch without CUDA there; the CUDA
builds for aarch64 are on PyTorch's own index.

Sources: pytorch/pytorch issue 160162 ("until pytorch 2.8, the pypi wheel only has CPU version pytorch on aarch64";
the cu128 index carries the aarch64 CUDA wheels); issue 134790 (aarch64 CUDA wheels first in the nightly cu124
index); pytorch/test-infra PR 7652 (the getting-started page: "For Linux Aarch64: pip3 install torch torchvision
--index-url https://download.pytorch.org/whl/cu128"). Jetson boards are aarch64 too, but take NVIDIA's JetPack wheels
(their integrated GPU is not an SBSA target), so they are left to other readings."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text


_ARM = re.compile(r"(?i)\baarch64\b|\barm64\b|\bsbsa\b|\bGH200\b|\bGB[23]00\b|\bGrace Hopper\b|\bAltra\b")
_JETSON = re.compile(r"(?i)\bjetson\b|\bjetpack\b|\bL4T\b|\btegra\b|\bOrin\b|\bXavier\b|\bDGX Spark\b|\bGB10\b")
# torch without CUDA on that machine, in torch's words or the user's: the wheel is not built with CUDA, CUDA missing
# from the wheels, a +cpu build, is_available() False
_NO_CUDA = re.compile(r"(?i)Torch not compiled with CUDA enabled|is_available\(\)\W{0,20}False\b|\+cpu\b|"
                      r"(?:built|compiled|wheels?|builds?)\b.{0,40}\b(?:without|no|not)\b.{0,20}\bCUDA\b|"
                      r"\bCUDA\b.{0,40}\b(?:not|no|without)\b.{0,30}\b(?:arm64|aarch64|ARM)\b|"
                      r"\bCPU[- ]only\b")


@rule("torch-build")
def cuda_torch_on_aarch64(ctx: Context) -> Optional[Diagnosis]:
    """An aarch64 Linux machine whose torch has no CUDA (PyPI's wheel), or a user asking where the aarch64 CUDA
    wheels are: PyTorch's CUDA index has them."""
    text = _text(ctx)
    if not (_ARM.search(text) and re.search(r"(?i)\b(?:py)?torch\b", text) and re.search(r"(?i)\bCUDA\b", text)):
        return None
    if _JETSON.search(text) or re.search(r"(?i)\b(?:macOS|Mac ?OS|Apple|M[1-4] (?:Pro|Max|Ultra)?|Windows)\b", text):
        return None   # Jetson's JetPack wheels; an Apple or Windows ARM machine has no CUDA at all
    if not _NO_CUDA.search(text):
        return None
    # (torch's answer may stand on the line after the call: the call's line is the one covered)
    said = _lines_matching(ctx, _NO_CUDA) or _lines_matching(ctx, r"is_available\(\)")
    return _make("torch-build", "PyPI's aarch64 torch is the CPU build",
                 "on Linux aarch64 (arm64 / SBSA servers) the torch wheels on PyPI are built without CUDA, so pip "
                 "install torch gives a CPU-only torch there; PyTorch publishes the aarch64 CUDA builds on its own "
                 "index (from torch 2.7 with CUDA 12.8; earlier only as nightlies)",
                 "pip install --force-reinstall torch torchvision --index-url https://download.pytorch.org/whl/cu128 "
                 "(or cu126 / cu129 / cu130 to match the driver; pre-releases: --pre --index-url "
                 "https://download.pytorch.org/whl/nightly/cu128); then python -c 'import torch; "
                 "print(torch.version.cuda, torch.cuda.is_available())'; packages that depend on torch can swap it back "
                 "to PyPI's: install them with the same --extra-index-url", [], said[:1], confirmed=False)
