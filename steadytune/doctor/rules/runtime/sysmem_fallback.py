"""Windows' CUDA system-memory fallback: since driver 536.40 an NVIDIA GPU on Windows that runs out of its own memory
spills into "shared GPU memory" (system RAM over PCIe) instead of failing with out of memory, so a run that does not fit
crawls or seems to hang (no progress bar moving, GPU at 100%) rather than stopping. The complaint is "too slow / stuck"
together with "the card's memory is not enough / full", or the shared GPU memory named; no out-of-memory error.

Facts: NVIDIA's support article 5490 ("System Memory Fallback for Stable Diffusion"): the fallback came with driver
536.40; from driver 546.01 the NVIDIA Control Panel has "CUDA - Sysmem Fallback Policy" under Manage 3D settings ->
Program Settings, per program (add the python.exe the app runs), value "Prefer No Sysmem Fallback". GPT-SoVITS#275's
maintainer gave that fix. It exists only on Windows (WDDM); a Linux paste is never this reading.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _ahead_of, _lines_matching, _make, _text, rule


# the shared GPU memory itself, named (Task Manager's "Shared GPU memory", 共享GPU内存 / 共享显存)
_SHARED = re.compile(r"(?i)\bshared (?:GPU )?memory\b.{0,40}\b(?:used|usage|fills?|grows?|rises?|goes up|full)|"
                     r"\b(?:spill|spills|spilling|falls? back|fallback|overflow\w*)\b.{0,30}\b(?:system RAM|shared (?:GPU )?"
                     r"memory|RAM)\b|共享(?:GPU)?(?:内存|显存)")
# the run crawling or stuck, in words
_SLOW = re.compile(r"(?i)\b(?:very |extremely |super |really )?slow(?:s| down|ed down)?\b|\bcrawl\w*|\b(?:stuck|hangs?|"
                   r"frozen|freez\w+)\b|\bprogress bar\b.{0,30}\b(?:not|doesn.t|never|stuck)|卡顿|卡住|很慢|特别慢|非常慢|"
                   r"进度条.{0,6}(?:不显示|不动|没有)|不动了")
# the card's memory not enough / full, in words (not an error line)
_NOT_ENOUGH = re.compile(r"(?i)\b(?:VRAM|GPU memory|video memory|memory)\b.{0,20}\b(?:not enough|insufficient|full|"
                         r"maxed|at 100\s*%)|\bnot enough (?:VRAM|GPU memory|memory)\b|(?:显存|内存).{0,6}(?:不够|不足|满了|"
                         r"爆了)|(?:显存|内存|\d{4}\s*(?:ti)?).{0,8}?不够|不够用")
_OOM_ERROR = re.compile(r"(?i)out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|显存不足.{0,10}error")
_LINUX = re.compile(r"(?i)\b(?:ubuntu|debian|fedora|arch linux|linux|centos|rocky|wsl)\b")


@rule("out-of-memory")
def windows_sysmem_fallback(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if _OOM_ERROR.search(text) or _LINUX.search(text) or ctx.sheet.has("os", "macos"):
        return None
    if any(f.value not in ("windows",) for f in ctx.sheet.of("os")):
        return None
    shared = _lines_matching(ctx, _SHARED)
    slow = _lines_matching(ctx, _SLOW)
    short = _lines_matching(ctx, _NOT_ENOUGH)
    if not slow or not (shared or short):
        return None
    diagnosis = _make("out-of-memory", "the GPU's memory spills into Windows' shared GPU memory",
                 "the run needs more memory than the card has; on Windows the NVIDIA driver (536.40 and newer) does "
                 "not fail with out of memory but moves the overflow into shared GPU memory (system RAM over PCIe), "
                 "so the run crawls or looks stuck at full GPU load instead of stopping",
                 "turn the fallback off for the program's Python: NVIDIA Control Panel -> Manage 3D settings -> "
                 "Program Settings -> Add the python.exe the app runs (its runtime / venv folder, as Task Manager "
                 "shows it) -> CUDA - Sysmem Fallback Policy: Prefer No Sysmem Fallback (driver 546.01 or newer); it "
                 "then stops with out of memory instead of crawling, and you shrink what fills the memory (a smaller "
                 "batch size, shorter audio / text slices, a smaller model or resolution) until it fits",
                 [], (shared or short)[:1] + slow[:1], confirmed=False)
    # ahead of the general "ran out of memory" reading of the same words: the crawl says the memory did not run out,
    # it spilled (that reading's smaller batch is the second step of this fix)
    return _ahead_of(diagnosis, "out-of-memory")
