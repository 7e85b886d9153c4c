"""A unified-memory GPU (NVIDIA's Jetson boards and Thor, the GB10 of DGX Spark, an AMD APU) whose GPU memory is the
system's RAM, refused a model "for lack of system memory" when the RAM is only held by the kernel's page cache (the
files just read, a model unloaded before): the program counts free memory without the cache it could reclaim (MemFree
instead of MemAvailable), so a model that fits is refused, or shown exactly as large as what is "available". Dropping
the clean page cache gives that memory back at once.

Source: ollama/ollama#12283 (Jetson Thor: "model requires more system memory (59.8 GiB) than is available (59.8
GiB)"; the reporter's `echo 3 > /proc/sys/vm/drop_caches` let the model load; the maintainers confirmed the
unified-memory accounting and the workaround); drop_caches itself: the kernel's Documentation/admin-guide/sysctl/vm.rst
(writing 3 frees the page cache and the reclaimable slab objects; run sync first so dirty pages are written)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import _APU_ARCHS, Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule

_UNIFIED = re.compile(r"(?i)\bJetson\b|\bNVIDIA Thor\b|\bThor\b[^\n]{0,20}\b(?:AGX|T5000|T4000|dev ?kit)|\bOrin\b|"
                      r"\bXavier\b|\bTegra\b|\bGB10\b|\bDGX Spark\b|unified memory|\bUMA\b|"
                      r"Radeon (?:\d{3}M|890M|880M|780M|760M|8060S|8050S|Graphics)\b|Ryzen AI (?:Max|\d)")
# the refusal for lack of system memory, with its two sizes where the program gives them
_REFUSED = re.compile(r"(?i)(?:requires|needs) more system memory \(([\d.]+) ?([GM]i?B)\) than is available "
                      r"\(([\d.]+) ?([GM]i?B)\)|insufficient (?:system )?memory|not enough (?:system )?memory "
                      r"(?:available|to load)")
_CACHE_SAID = re.compile(r"(?i)\b(?:page ?cache|buff/cache|cached|reclaim\w*|not (?:freed|released)|stays? occupied|"
                         r"still (?:occupied|used|in use)|clean(?:ing)? up memory)\b")


@rule("apu-memory")
def unified_memory_page_cache(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a unified-memory GPU (by name or APU arch), a model refused for lack of system memory, and the
    paste either saying the memory is only held (cache, not freed) or giving a refusal whose two sizes are within 10%
    of each other (what a program counting MemFree shows when the rest is cache)."""
    text = _text(ctx)
    apu = any(a in _APU_ARCHS for a in ctx.sheet.machine_archs)
    if not (_UNIFIED.search(text) or apu):
        return None
    lines = _lines_matching(ctx, _REFUSED)
    if not lines:
        return None
    sizes = _REFUSED.search("\n".join(e.line for e in lines))
    close = False
    if sizes and sizes.group(1):
        need, have = float(sizes.group(1)), float(sizes.group(3))
        close = sizes.group(2) == sizes.group(4) and have > 0 and abs(need - have) <= 0.1 * have
    if not (close or _CACHE_SAID.search(text)):
        return None
    return _ahead_of(_make(
        "apu-memory", "the GPU's memory is the RAM, held by the page cache the program does not count",
        "on a unified-memory GPU the model is loaded into system RAM; the program counts only free memory, not the "
        "page cache the kernel would give back, so after files were read (or a model unloaded) it refuses a model "
        "that fits",
        "free the page cache, then load the model again: sync && echo 3 | sudo tee /proc/sys/vm/drop_caches (free -h: "
        "buff/cache must fall and free rise); a model or context a little smaller leaves room where the cache "
        "fills up again", [ctx.line_fact(lines[0])], lines[:1]), "out-of-memory")
