"""A large model on an Apple silicon Mac that runs slowly, with the GPU idle and the work on the CPU, although the RAM
is ample: Metal lets the GPU keep only part of the unified memory resident (wired) - its recommendedMaxWorkingSetSize,
about 75% of the RAM - and MLX / llama.cpp / LM Studio treat it as the GPU's ceiling. A model larger than that (or
larger than what is still free of it, which is why it works right after a boot) is paged or falls back to the CPU.
macOS raises the cap with the iogpu.wired_limit_mb sysctl (macOS 14 and newer; lost at reboot), leaving 8-16 GB for the
system.

Decided by: an Apple silicon Mac named, a model runner on Metal (MLX, LM Studio, llama.cpp, Ollama), and the symptom:
slow generation with the GPU near idle or the work on the CPU, or "plenty of RAM" beside a large model. Sources:
MLX's mlx.core.set_wired_limit docs ("You can increase the system wired limit with: sudo sysctl
iogpu.wired_limit_mb=<size_in_megabytes>"; macOS 15 for MLX's own wired limit); lmstudio-ai/mlx-engine#34 (a 192 GB
Mac Studio: iogpu.wired_limit_mb with iogpu.disable_wired_collector=1 fixed it); the ~75% default: MLX PR #64's
maintainer ("the recommended working set is usually 0.75 * the total ram")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_MAC = re.compile(r"(?i)\bMac ?(?:Studio|mini|Book\w*|Pro)\b|\bApple M[1-5]\b|(?<![\w])M[1-5] ?(?:Pro|Max|Ultra)\b|"
                  r"\bmacOS\b|\bApple silicon\b")
_RUNNER = re.compile(r"(?i)\bmlx(?:[_-]\w+)?\b|LM ?Studio|llama\.cpp|\bollama\b|\bMetal\b")
_SLOW_ON_CPU = re.compile(r"(?i)GPU (?:usage|utili[sz]ation|load)\b.{0,30}(?:near |close to |almost |about )?0\s*%|"
                          r"(?:run|execut|load)\w*\b.{0,40}\bon (?:the )?CPU|\b(?:uselessly |very |extremely |painfully )"
                          r"slow\b|tokens?/s.{0,20}\b0\.\d")
_RAM = re.compile(r"(?i)\b(\d{2,3})\s*GB\b.{0,40}(?:RAM|unified|memory|Mac)|(?:RAM|unified memory)\D{0,20}(\d{2,3})\s*GB")


@rule("apu-memory")
def metal_wired_limit(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not (_MAC.search(text) and _RUNNER.search(text)):
        return None
    lines = _lines_matching(ctx, _SLOW_ON_CPU)
    if not lines or not re.search(r"(?i)plenty of (?:RAM|memory)|\b\d{2,3}\s*B\b|\bQ8\b|\blarge\b|\b\d{2,3}\s*GB\b", text):
        return None
    ram = _RAM.search(text)
    gb = int(next(g for g in ram.groups() if g)) if ram else None
    value = f"{(gb - 16) * 1024}" if gb and gb >= 48 else f"{(gb - 8) * 1024}" if gb and gb > 16 else "<MB>"
    example = (f" (on this {gb} GB Mac: sudo sysctl iogpu.wired_limit_mb={value}, leaving "
               f"{16 if gb >= 48 else 8} GB to macOS)" if gb and gb > 16 else "")
    return _make(
        "apu-memory", "the model is larger than the GPU's share of the Mac's unified memory",
        "Metal lets the GPU keep only part of the unified memory wired (about 75% of the RAM by default); a model "
        "beyond that share, or beyond what is still free of it after other work, is paged or left to the CPU, so the "
        "GPU idles and generation crawls however much RAM the Mac has",
        "raise macOS's GPU wired-memory limit (macOS 14 and newer, until the next reboot): sudo sysctl "
        f"iogpu.wired_limit_mb=<RAM in MB minus 8-16 GB for macOS>{example}; if it still slows after a while, also "
        "sudo sysctl iogpu.disable_wired_collector=1; update the runner (its bundled MLX / llama.cpp) too, or take a "
        "smaller quantisation that fits the default share",
        [ctx.line_fact(lines[0])], lines[:1], confirmed=False)
