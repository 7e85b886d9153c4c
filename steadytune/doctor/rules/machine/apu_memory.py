"""An APU's GPU memory: the carve-out (UMA frame buffer) and the GTT pool the driver lets it use."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.hardware.unified_memory import GIB, PAGE
from steadytune.doctor.rules.base import (
    _APU_ARCHS, _arch_fact, Context, Diagnosis, _lines_matching, _make, on_windows, rule, _symptom_lines,
)

# running out of memory said in words ("getting out of memory errors", "OOM"), where no error line was pasted
_OOM_SAID = re.compile(r"(?i)\bout of (?:GPU |video )?memory\b|\bOOM\b|显存不足|内存不足")
# the machine's one memory said, in the sizes APUs are sold with: below 128 GB, out of memory said in words is the
# model against the machine's size (runtime/model_memory.py), not how the memory is split between carve-out and GTT
_MACHINE_GB = re.compile(r"(?i)(?<![\d.])(16|32|48|64|96|128) ?GB\b")


def _smaller_machine(ctx: Context) -> bool:
    sizes = [int(m.group(1)) for m in _MACHINE_GB.finditer("\n".join(ctx.sheet.lines))]
    return bool(sizes) and max(sizes) < 128


# a tool's view of the GPU memory far below the carve-out the user set ("set VRAM to 96GB but only 15.5 GiB available")
_SET_BUT_SEES = re.compile(r"(?i)\bset\b.{0,30}\b(\d{2,3})\s*G(?:i?B)?\b.{0,60}\bonly\b.{0,20}?(\d{1,2}(?:\.\d+)?)\s*Gi?B")


_MEMORY_SHORT = re.compile(r"(?i)(?:shared (?:gpu )?memory|\bVRAM\b|\bGTT\b|\bUMA\b|GPU memory).{0,60}"
                           r"(?:can't|cannot|can not|unable|only|not (?:be )?used?|limit(?:s|ed|ing)?|too (?:little|small))|"
                           r"(?:can't|cannot|only|unable to) (?:use|utili[sz]e|allocate|see).{0,40}(?:shared|VRAM|GTT|memory)|"
                           r"\bonly\s*~?\s*\d+(?:\.\d+)?\s*[MG]i?B (?:of )?(?:VRAM|GTT|GPU memory|dedicated|shared)|"
                           r"\bonly (?:use|see|allocate|get)s?\b.{0,20}\b\d+\s*[GM]i?B\b.{0,20}\b(?:of|out of)\b.{0,10}\d+\s*[GM]i?B|\bhalf\b.{0,40}\bGTT\b|\bGTT\b.{0,40}\bhalf\b|"
                           # in Chinese: the memory "cannot be used" / "only the BIOS share is recognised"
                           r"(?:显存|GTT|内存).{0,20}(?:用不上|用不了|只能用|识别不到)|只(?:识别|认|看)到?.{0,12}(?:显存|BIOS)")


# a GTT size asked through the out-of-tree amdttm module's parameters (amdgpu-dkms) or the deprecated amdgpu.gttsize,
# and not granted: on kernels whose amdgpu uses the kernel's own ttm module, ttm.pages_limit is what caps the GTT
# (amdgpu's gttsize documentation: deprecated in favour of ttm.pages_limit; AMD's Strix Halo guide sizes it in pages)
_TTM_ASKED = re.compile(r"(?i)\bamdttm\.(?:pages_limit|page_pool_size)\b|\bamdgpu\.gttsize\b")
_NOT_GRANTED = re.compile(r"(?i)\bno longer\b|\bnot? (?:take|taking|have|having|has) (?:any )?effect|\bignored\b|"
                          r"\bdoes(?:n.t| not) (?:work|apply|change|provide)|\bdid(?:n.t| not) (?:work|apply|change)|"
                          r"\bstill (?:shows?|reports?|only|capped|limited)\b|\bnot (?:honou?red|respected|applied)\b|"
                          r"\bno (?:effect|change)\b|\bdeprecat\w+|\bconfl?icting\b|没有?生效|不生效|无效|不起作用|没(?:有)?用")
_GIB_ASKED = re.compile(r"(?i)\b(\d{2,3}(?:\.\d+)?)\s*Gi?B\b|(?<![\w.])(\d{2,3})\s*G(?![\w.])")
# the size the user asks for, where the RAM is named too ("128GB ... I want 110 GiB for the GPU", "想给 GPU 96G")
_GIB_WANTED = re.compile(r"(?i)\b(?:want|need|give|allocate)\b\D{0,20}?(\d{2,3}(?:\.\d+)?)\s*G(?:i?B)?\b|"
                         r"(?:想给|想要|给|分配)\D{0,8}?(\d{2,3})\s*G")


@rule("apu-memory")
def ttm_limit_not_amdttm(ctx: Context) -> Optional[Diagnosis]:
    text = "\n".join(ctx.sheet.lines)
    # the kernel's own parameter already set (not amdttm's, which the lookbehind leaves out): another cause
    if not _TTM_ASKED.search(text) or not _NOT_GRANTED.search(text) or re.search(r"(?<![\w.])ttm\.pages_limit", text):
        return None
    size = _GIB_WANTED.search(text) or _GIB_ASKED.search(text)
    gib = float(next(g for g in size.groups() if g)) if size else None
    pages = int(gib * GIB / PAGE) if gib else None
    value = (f"ttm.pages_limit={pages} ttm.page_pool_size={pages} ({gib:g} GiB in 4 KiB pages: GiB x 262144)"
             if pages else "ttm.pages_limit=<GiB x 262144> ttm.page_pool_size=<the same> (4 KiB pages)")
    return _make("apu-memory", "the GTT size set through amdttm / amdgpu.gttsize is not the one applied",
                 "on these kernels the APU's GTT (its unified memory) is capped by the kernel's own ttm module, not "
                 "by the out-of-tree amdttm of amdgpu-dkms, so amdttm.page_pool_size / amdttm.pages_limit are "
                 "ignored; amdgpu.gttsize is deprecated and conflicts with the ttm limit",
                 f"size it with the kernel's ttm parameters on the kernel command line: {value} (in "
                 "/etc/default/grub's GRUB_CMDLINE_LINUX_DEFAULT, then sudo update-grub and reboot); keeping the "
                 "amdttm.* values beside them is harmless; drop amdgpu.gttsize. Check: cat "
                 "/sys/module/ttm/parameters/pages_limit and sudo dmesg | grep -i gtt",
                 [], _lines_matching(ctx, _TTM_ASKED.pattern)[:2])


@rule("apu-memory")
def apu_memory(ctx: Context) -> Optional[Diagnosis]:
    archs = ctx.sheet.machine_archs
    apu = [a for a in archs if a in _APU_ARCHS]
    pools = {f.detail: int(f.value) for f in ctx.sheet.of("memory_total")}
    errors = ctx.of("apu-memory", "out-of-memory") or (_lines_matching(ctx, _OOM_SAID) if apu and
                                                        not _smaller_machine(ctx) else [])
    short = [l for l in ctx.sheet.lines if _MEMORY_SHORT.search(l)]
    gtt_said = [l for l in short if re.search(r"\bGTT\b", l)]
    if any(a not in _APU_ARCHS and a.startswith("gfx") for a in archs):
        return None
    # the APU said in words, or by its graphics' name (Radeon 680M/780M/890M, 8060S) where no arch was read
    said_apu = any(re.search(r"(?i)\bAPUs?\b|unified memory|\biGPU\b|\b(?:Radeon\s*)?[6-9][0-9]0M\b|\b80[4-6]0S\b", l)
                   for l in ctx.sheet.lines)
    limit_said = [l for l in short if re.search(r"(?i)\bUMA\b|\bTTM\b|\bGTT\b", l)]
    if not apu and not ("VRAM" in pools and "GTT" in pools) and not gtt_said and not (said_apu and (limit_said or short)):
        return None
    name = f"the APU ({apu[0]})" if apu else "the APU"
    carve, seen = _vram_bytes(ctx.sheet.lines), _pool_kib(ctx.sheet.lines)
    if apu and carve and seen and carve >= 32 * GIB and seen * 1024 < carve / 2:
        return _make("apu-memory", f"HIP sees {seen / 2**20:.1f} GiB of {name}'s {carve / GIB:.0f} GiB carve-out",
                     "the kernel driver reports the whole carve-out (mem_info_vram_total), but kernels before 6.16.9 "
                     "cap the memory pool ROCm's runtime gets on these APUs",
                     "upgrade the kernel to 6.16.9 or later (a mainline or HWE kernel); ROCm itself needs no change",
                     [_arch_fact(ctx, apu[0])], errors)
    if not errors and not short and not pools:
        return None
    evidence = [_arch_fact(ctx, apu[0])] if apu else ctx.sheet.of("memory_total")[:2]
    if pools.get("VRAM", 0) >= 4 * pools.get("GTT", 1 << 40) and errors:
        return _make("apu-memory", f"{name} puts its tensors in the small GTT",
                     f"the BIOS carve-out (VRAM, {pools['VRAM']} MiB) takes most of the RAM and leaves the GTT only "
                     f"{pools['GTT']} MiB, and allocations beyond the carve-out land in the GTT",
                     "set the UMA frame buffer in the BIOS to its minimum (512 MB) so the GTT covers most of the RAM "
                     "(and raise ttm.pages_limit where the GTT is still capped), then reboot", evidence, errors)
    ram = _ram_gib(ctx.sheet.lines)
    pages = int(ram * 0.75 * GIB / PAGE) if ram else None
    limit = (f"ttm.pages_limit={pages} (3/4 of the {ram:g} GiB RAM in 4 KiB pages)" if pages else
             "ttm.pages_limit=<3/4 of the RAM in 4 KiB pages>")
    tool = ctx.tool(errors)
    ggml = ("; llama.cpp / Ollama (ggml's HIP backend): GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 makes it allocate from "
            "system memory, past the carve-out" if tool in ("llama.cpp", "ollama", None) else "")
    if on_windows(ctx, "\n".join(ctx.sheet.lines)):   # Windows gives the GPU its carve-out only: no GTT to raise
        fix = (f"raise the UMA frame buffer in the BIOS (or AMD Software's Variable Graphics Memory), or raise the GTT "
               f"cap where the tool runs on Linux with the kernel parameter {limit}, then reboot{ggml}")
    else:
        # on Linux the GTT can hold nearly all the RAM, and ROCm allocates from it on an APU: the carve-out at its
        # minimum leaves the rest to the GTT instead of splitting the RAM between two pools (AMD's guidance for
        # Ryzen AI Max on Linux; unified_memory.py's sources)
        fix = (f"give the GPU its memory through the GTT: set the UMA frame buffer in the BIOS to its minimum (512 "
               f"MB) and raise the GTT cap with the kernel parameter {limit} (amdgpu.gttsize is deprecated), then "
               f"reboot (or raise the UMA frame buffer instead, for a tool that counts only the carve-out){ggml}")
    seen = _SET_BUT_SEES.search("\n".join(ctx.sheet.lines))
    if seen and tool in ("ollama", None) and re.search(r"(?i)\bollama\b", "\n".join(ctx.sheet.lines)):
        fix += ("; Ollama itself: releases that size an iGPU by its carve-out alone report a fraction of it, so update "
                "Ollama to one that counts the GTT on iGPUs (its log's 'inference compute' line shows the total it uses)")
    return _make("apu-memory", f"{name} runs out of GPU memory",
                 "an APU's GPU memory is the BIOS carve-out (UMA frame buffer) plus GTT, which the kernel caps at half "
                 "the RAM by default", fix, evidence, errors or _symptom_lines(ctx, []))


def _vram_bytes(lines: list[str]) -> Optional[int]:
    """The carve-out the kernel reports: the number printed after `cat .../mem_info_vram_total`."""
    for i, line in enumerate(lines[:-1]):
        if "mem_info_vram_total" in line:
            m = re.match(r"\s*(\d{9,})\b", lines[i + 1])
            if m:
                return int(m.group(1))
    return None


def _pool_kib(lines: list[str]) -> Optional[int]:
    """rocminfo's GPU memory pool size, in KiB (its first pool, the one allocations come from)."""
    for line in lines:
        m = re.match(r"\s*Size:\s+(\d+)\(0x[0-9a-f]+\) KB", line)
        if m:
            return int(m.group(1))
    return None


def _ram_gib(lines: list[str]) -> Optional[float]:
    for line in lines:
        m = re.search(r"MemTotal:\s+(\d+)\s*kB|total RAM (\d+) MB|(\d+(?:\.\d+)?)\s*Gi?B (?:of )?(?:system )?RAM", line)
        if m:
            if m.group(1):
                return round(int(m.group(1)) / 2**20)
            if m.group(2):
                return round(int(m.group(2)) / 1024)
            return float(m.group(3))
    return None
