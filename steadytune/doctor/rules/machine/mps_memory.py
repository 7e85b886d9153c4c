"""Apple silicon's unified memory under torch's MPS allocator: the GPU's memory is the machine's RAM, and the
allocator's default cap lies beyond what the RAM can give.

PyTorch's "MPS Environment Variables" page: PYTORCH_MPS_HIGH_WATERMARK_RATIO is the hard limit on the allocations, as
a ratio of device.recommendedMaxWorkingSetSize, 1.7 by default (above 1.0: beyond the recommended size; 0.0: no
limit); PYTORCH_MPS_LOW_WATERMARK_RATIO is the soft limit at which the allocator frees its cached buffers, 1.4 by
default on unified memory, and must be no higher than the high one (checked v18b: MPSAllocator.mm's
TORCH_CHECK(m_low_watermark_ratio <= high_watermark_limit, "invalid low watermark ratio")).
With the defaults a job that keeps allocating on a Mac
slides into swap and can freeze or restart the machine rather than fail with "MPS backend out of memory"
(index-tts/index-tts#414: an M3 Ultra climbing to 249 of 256 GB over a few generations; the watermark ratios,
exported before the web UI started, held it near 60% of the RAM). PYTORCH_ENABLE_MPS_FALLBACK=1 runs the ops MPS
lacks on the CPU.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_APPLE = re.compile(r"(?i)\bApple M[1-5]\b|(?<![\w])M[1-5] ?(?:Pro|Max|Ultra)\b|\bmacOS\b|\bMac ?(?:Studio|mini|Book)"
                    r"\w*|\bdevice=.?mps\b|\bmps backend\b|torch\.backends\.mps|\bMPS\b")
# memory that keeps growing until the machine swaps, freezes or restarts (the user's words, English and Chinese)
_RUNAWAY = re.compile(r"(?i)memory leak|\bleak(?:s|ing)?\b.{0,20}\bmemory|(?:RAM|memory)(?: usage)?\b.{0,40}\b(?:shoot|"
                      r"climb|grow|keep[s]? (?:growing|rising|increasing)|goes? up|balloon|explod)\w*|\bswap(?:ping)?\b"
                      r".{0,40}\b(?:freez|crash|hang)\w*|\b(?:freez|crash|restart|reboot)\w*\b.{0,40}\b(?:whole|entire) "
                      r"(?:mac|macOS|system|machine)|(?:whole|entire) (?:mac|macOS|system|machine)\b.{0,30}\b(?:freez|"
                      r"crash|restart|reboot)\w*|内存(?:泄漏|泄露|暴涨|一直涨|持续增长)")
_WATERMARK_SET = re.compile(r"PYTORCH_MPS_HIGH_WATERMARK_RATIO\s*=\s*([\d.]+)")


@rule("apu-memory")
def mps_unified_memory(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an Apple-silicon Mac (or torch's MPS device) named, and memory that runs away until the machine
    swaps, freezes or restarts. (MPS's own "out of memory" is a job larger than the cap, not this reading.)"""
    text = _text(ctx)
    if not _APPLE.search(text):
        return None
    lines = _lines_matching(ctx, _RUNAWAY)
    if not lines:
        return None
    given = _WATERMARK_SET.search(text)
    if given and given.group(1) not in ("0", "0.0"):
        return None   # a cap already set (and not the unlimited 0.0): not this reading
    return _make("apu-memory", "torch's MPS allocator is not capped below the Mac's unified memory",
                 "on Apple silicon the GPU's memory is the machine's RAM, and torch's MPS allocator may allocate up to "
                 "1.7x the recommended working set by default (PYTORCH_MPS_HIGH_WATERMARK_RATIO=1.7), keeping its "
                 "cached buffers until 1.4x; a program that keeps allocating fills the RAM and swap, and macOS freezes "
                 "or restarts before torch reports an out-of-memory error",
                 "cap the MPS allocator before starting the program: export PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.7 and "
                 "export PYTORCH_MPS_LOW_WATERMARK_RATIO=0.5 (the low, soft limit no higher than the high one; both "
                 "are ratios of the recommended working set), with PYTORCH_ENABLE_MPS_FALLBACK=1; then the job fails with MPS's "
                 "out-of-memory message instead of taking the machine down, and its caches are freed sooner",
                 [ctx.line_fact(lines[0])], lines[:1])
