"""Ollama built from source that runs on the CPU only. A source build gets a GPU runner only for the toolkit (CUDA,
ROCm) its build found when it was configured (go generate in the early releases; cmake in docs/development.md's steps
now): built before the toolkit was installed, or without it on the path, it has only the CPU runner, and the GPU
runtime then reports no device or is never tried. The official release bundles the GPU runners and needs only the
driver.

The ways out, in the order a user should try them: the official release (Linux and WSL 2: the install script; Windows
and macOS: the installer / app), or, to keep a source build, install the toolkit first and build again.

Sources: ollama/ollama#684 (a WSL 2 build with `go generate ./... && go build .` made before CUDA was installed ran on
the CPU with "no CUDA-capable device is detected"; the maintainer: use the release via the install script, which the
reporter confirmed worked); the install script's line from Ollama's README (curl -fsSL https://ollama.com/install.sh |
sh), as stale_install.py gives it."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import NOT_DETECTED, Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule

_SOURCE_BUILD = re.compile(r"(?i)\bgo generate\b|\bgo build\b|\b(?:built|build|building|compiled|compiling)\b[^\n]{0,30}"
                           r"\bfrom (?:the )?source\b|\bsource build\b")
_NO_GPU = re.compile(r"(?i)no CUDA-capable device is detected|no ROCm-capable device is detected|\bhipErrorNoDevice\b|"
                     r"\b(?:runs?|running|works?) (?:only )?(?:with|on) (?:the )?CPU\b|\bnot (?:with|on) (?:the )?GPU\b|"
                     r"library=cpu|offloaded 0/\d+ layers|no compatible GPUs were discovered|" + NOT_DETECTED[4:])


@rule("torch-build")
def ollama_source_build_without_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Ollama, the user's own build of it (go generate / go build / built from source), and the GPU not
    used (no device reported, the CPU runner, the user's words)."""
    text = _text(ctx)
    if not re.search(r"(?i)\bollama\b", text) or not _SOURCE_BUILD.search(text):
        return None
    lines = _lines_matching(ctx, _NO_GPU)
    if not lines:
        return None
    toolkit = "ROCm" if re.search(r"(?i)\brocm\b|\bhip\b|radeon|\bgfx\d", text) else "CUDA toolkit"
    release = ("the official release instead of the source build: the Windows installer (OllamaSetup.exe from "
               "ollama.com/download)" if on_windows(ctx, text) and not re.search(r"(?i)\bwsl", text) else
               "the official release instead of the source build: curl -fsSL https://ollama.com/install.sh | sh "
               "(Linux and WSL 2; it bundles the CUDA and ROCm runners and needs only the GPU driver)")
    return _make("torch-build", "this source build of Ollama has no GPU runner",
                 f"a source build of Ollama carries a GPU runner only for the toolkit found when it was built; built "
                 f"before the {toolkit} was installed (or without it on the path), it runs on the CPU and the GPU is "
                 "reported missing",
                 f"install {release}; to keep building from source: install the {toolkit} first, then build again "
                 "from a clean tree as the repository's docs/development.md says (the GPU runner is built only when "
                 "the toolkit is found at configure time)", [ctx.line_fact(lines[0])], lines[:2])
