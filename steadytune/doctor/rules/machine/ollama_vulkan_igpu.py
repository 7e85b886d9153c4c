"""Ollama on an integrated GPU through a Vulkan build that sizes the iGPU's memory as nothing: the scheduler logs the
runner with vram="0 B" (or 0 layers offloaded) and the whole model goes to the CPU, although Vulkan found the GPU. A
repackaged or forked Vulkan build of Ollama (an image tagged -vulkan from another vendor's fork) reads an APU's shared
memory wrongly; upstream Ollama carries its own Vulkan backend since 0.12.11 (behind OLLAMA_VULKAN=1 for the server;
on by default in later releases), which runs these APUs.

Sources: MooreThreads/ollama-musa#22 (mthreads/ollama:0.11.4-vulkan on a Radeon 780M: runner.inference=vulkan
runner.vram="0 B", everything on the CPU; the reporter: stock Ollama with OLLAMA_VULKAN=1 works well on the APU);
ollama/ollama#12673 (dhiltgen: Vulkan in the official binaries from 0.12.11, enabled with OLLAMA_VULKAN=1), as
arch/ollama_rocm_drops.py cites it."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import _APU_ARCHS, Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_ZERO_VRAM = re.compile(r"(?i)runner\.vram=\"?0 B\"?|\bvram=\"?0 B\b|offloaded 0/\d+ layers to GPU|"
                        r"(?:loading|loads|runs?|running|loaded) (?:\w+ )?(?:to|on) (?:the )?CPU(?: only)?\b|\bCPU only\b")
_VULKAN = re.compile(r"(?i)\bvulkan\b")
_IGPU = re.compile(r"(?i)Radeon (?:\d{3}M|8060S|8050S|Vega \d+)\b|\b[6-9][0-9]0M\b|\biGPU\b|integrated (?:GPU|graphics)|\bAPU\b|"
                   r"Intel(?:\(R\))? (?:Arc|Iris|UHD)")


@rule("apu-memory")
def ollama_vulkan_igpu_zero_vram(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Ollama, its Vulkan runner, an integrated GPU (by name or APU arch), and the model placed with no GPU
    memory (vram 0 B, no layers offloaded, "loading to CPU only")."""
    text = _text(ctx)
    if not re.search(r"(?i)\bollama\b", text) or not _VULKAN.search(text):
        return None
    apu = any(a in _APU_ARCHS for a in ctx.sheet.machine_archs)
    if not (apu or _IGPU.search(text)):
        return None
    lines = _lines_matching(ctx, _ZERO_VRAM)
    if not lines:
        return None
    fork = re.search(r"(?i)\b(?!ollama/ollama)([\w.-]+/ollama(?:-\w+)?):[\w.-]*vulkan", text)
    build = f"the {fork.group(1)} image's Vulkan build" if fork else "this Vulkan build"
    return _first(_make(
        "apu-memory", "Ollama's Vulkan runner sizes the integrated GPU's memory as nothing",
        f"{build} reads the integrated GPU's shared memory as 0 B, so the scheduler puts every layer on the CPU although "
        "Vulkan found the GPU",
        "run upstream Ollama (0.12.11 or later) on its own Vulkan backend: set OLLAMA_VULKAN=1 for the server (a "
        "service: sudo systemctl edit ollama.service, Environment=\"OLLAMA_VULKAN=1\", then restart it; Docker: the "
        "ollama/ollama image with -e OLLAMA_VULKAN=1 and --device /dev/dri); on by default in later releases; the "
        "server's log must then show the model's layers offloaded to the GPU", [ctx.line_fact(lines[0])], lines[:1]))
