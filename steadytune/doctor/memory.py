"""APU unified memory in doctor: what the GPU of a Strix Halo / Strix Point machine can really use (its GTT,
not the small carve-out the tools print), read live from sysfs and the kernel command line or from a saved
`dmesg`, and the kernel parameters that raise it. The figures and parameters are hardware/unified_memory.py's; this
module turns them into findings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from steadytune.doctor.findings import Finding
from steadytune.hardware.unified_memory import (
    DrmCard,
    gtt_kernel_arguments,
    kernel_memory_params,
    looks_like_ttm_default,
    suggested_gtt_gib,
    usable_gib,
)

_READY = re.compile(r"(?:amdgpu ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d): .*?)?(\d+)M of (VRAM|GTT) memory ready")
_CMDLINE = re.compile(r"(?:Kernel command line|Command line): (.*)$", re.MULTILINE)


@dataclass
class KernelLog:
    """What a saved `dmesg` says about GPU memory."""
    vram_gib: dict[Optional[str], float] = field(default_factory=dict)   # PCI address (or None) -> GiB
    gtt_gib: dict[Optional[str], float] = field(default_factory=dict)
    cmdline: Optional[str] = None
    gttsize_deprecated: bool = False


# A kernel log line: dmesg's `[  12.345678]`, `dmesg -T`'s `[Tue Jul 15 19:00:37 2025]`, or journalctl's
# `Aug 23 23:38:11 host kernel:`.
_KERNEL_LINE = re.compile(r"^\s*(?:\[\s*\d+\.\d+\]|\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\]|\w{3} +\d+ [\d:]+ \S+ kernel:)",
                          re.MULTILINE)


def looks_like_dmesg(text: str) -> bool:
    return bool(_KERNEL_LINE.search(text)) and bool(re.search(r"amdgpu|\[drm\]|Command line|kfd", text))


def parse_kernel_log(text: str) -> KernelLog:
    log = KernelLog()
    for match in _READY.finditer(text):
        bdf, mib, kind = match.groups()
        (log.vram_gib if kind == "VRAM" else log.gtt_gib)[bdf] = round(int(mib) / 1024, 2)
    command = _CMDLINE.search(text)
    log.cmdline = command.group(1).strip() if command else None
    log.gttsize_deprecated = "Configuring gttsize via module parameter is deprecated" in text
    return log


def apu_memory_findings(label: str, check: str, torch_gib: Optional[float] = None, vram_gib: Optional[float] = None,
                        gtt_gib: Optional[float] = None, cmdline: Optional[str] = None,
                        ram_gib: Optional[float] = None) -> list[Finding]:
    """Findings about one APU's memory: what train will plan with, and how to give the GPU more."""

    findings = []
    figures = {"GTT": gtt_gib, "carve-out": vram_gib, "torch": torch_gib}
    known = {k: v for k, v in figures.items() if v}
    if known:
        card = DrmCard("saved", None, None, vram_gib, None, gtt_gib)
        value, how_read = usable_gib(torch_gib, card, ram_gib)
        figures_text = ", ".join(f"{k} {v:g} GiB" for k, v in known.items())
        if value == max(known.values()):
            what = f"{label}: the GPU can use {value:g} GiB of unified memory (the largest of {figures_text})"
        else:
            limit = ("torch's figure: the TTM limit is at its default" if how_read.startswith("torch") else
                     "the GTT less the OS's share of the RAM")
            what = f"{label}: the GPU can use {value:g} GiB of unified memory ({figures_text}; {limit})"
        findings.append(Finding.info(check, what,
                                     "train plans gradient checkpointing with this figure, not with the carve-out alone"))
    if gtt_gib is None:
        findings.append(Finding.info(check, f"{label}: the GTT size (the system memory this APU can map) is not known",
                                     "tools such as amd-smi print only the BIOS carve-out, often 512 MB",
                                     "cat /sys/class/drm/card*/device/mem_info_gtt_total   (or: sudo dmesg | grep 'memory ready')"))
    params = kernel_memory_params(cmdline or "")
    target = suggested_gtt_gib(ram_gib)
    how = (f"add to the kernel command line: {gtt_kernel_arguments(target)}   (GiB = pages x 4 KiB; e.g. in "
           "/etc/default/grub.d/amdgpu.cfg: GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX ...\", then update-grub and "
           "reboot); or raise the UMA frame buffer (carve-out) in the BIOS") if target else ""
    if looks_like_ttm_default(torch_gib, gtt_gib, ram_gib):
        findings.append(Finding.warn(check, f"{label}: torch can allocate {torch_gib:g} GiB, half of the {ram_gib:g} GiB "
                                            f"RAM, though the GTT is {gtt_gib:g} GiB",
                                     "HIP sizes an APU's memory by the TTM page limit, which defaults to half of RAM; "
                                     "amdgpu.gttsize does not raise it (deprecated for ttm.pages_limit). Train plans with "
                                     f"{torch_gib:g} GiB until it is raised (a 128 GB Strix Halo reported 62.47 of 128 GiB: "
                                     "unsloth PR #7960, #7878)", how))
    elif gtt_gib and ram_gib and target and gtt_gib > target + 1:
        findings.append(Finding.warn(check, f"{label}: the GPU may map {gtt_gib:g} GiB of {ram_gib:g} GiB RAM, leaving the "
                                            f"OS less than {ram_gib - target:g} GiB",
                                     "an APU's training shares RAM with the OS, Python and the data loader: a GPU allowed "
                                     "nearly all of it ends in the OOM killer or swap; train plans with "
                                     f"{target:g} GiB (the RAM less max(8 GiB, RAM/8), as unsloth PR #7960 reserves a "
                                     "bounded headroom)", how))
    if gtt_gib is not None and target and gtt_gib < target * 0.8 and (vram_gib or 0) < target * 0.8:
        findings.append(Finding.warn(check, f"{label}: the GPU may map only {gtt_gib:g} GiB of {ram_gib:g} GiB RAM",
                                     "the GTT limit (ttm.pages_limit) caps what training can allocate on an APU",
                                     how))
    if "amdgpu.gttsize" in params:
        findings.append(Finding.warn(check, f"{label}: amdgpu.gttsize={params['amdgpu.gttsize'] * 1024:g} (MiB) is set on the "
                                            "kernel command line",
                                     "the kernel says 'Configuring gttsize via module parameter is deprecated, please use "
                                     "ttm.pages_limit'; the TTM limit is what applies (ROCm/ROCm #5671)",
                                     how or "use ttm.pages_limit=<4 KiB pages> (and amdttm.pages_limit for the DKMS driver)"))
    elif params:
        findings.append(Finding.info(check, f"{label}: kernel GTT parameters: "
                                            + ", ".join(f"{k} = {v:g} GiB" for k, v in params.items())))
    return findings


# A memory report: the figures users paste when asked what an APU's GPU sees (torch's total_memory and
# mem_get_info, sysfs's GTT/VRAM totals, the RAM), one "label: N GiB" per line, as unsloth's maintainers ask for.
_REPORT = {
    "torch": r"(?:props\.)?total_memory|mem_get_info total",
    "gtt": r"(?:sysfs )?GTT total|mem_info_gtt_total",
    "vram": r"(?:sysfs )?VRAM total|mem_info_vram_total",
    "ram": r"host RAM|RAM total|MemTotal",
}


def looks_like_memory_report(text: str) -> bool:
    found = {k for k, label in _REPORT.items()
             if re.search(rf"^\s*(?:{label})\s*:\s*[\d.]+\s*GiB", text, re.MULTILINE | re.IGNORECASE)}
    return "torch" in found and len(found) >= 2


def parse_memory_report(text: str) -> dict[str, object]:
    """-> {torch, gtt, vram, ram: GiB; name: the GPU line; torch_version; hip}."""
    report: dict[str, object] = {}
    for key, label in _REPORT.items():
        match = re.search(rf"^\s*(?:{label})\s*:\s*([\d.]+)\s*GiB", text, re.MULTILINE | re.IGNORECASE)
        if match:
            report[key] = float(match.group(1))
    name = re.search(r"^(.*Radeon.*)$", text, re.MULTILINE)
    if name:
        report["name"] = name.group(1).strip()
    version = re.search(r"^torch\s*:?\s+(\d[\w.+]*)\s*$", text, re.MULTILINE)
    if version:
        report["torch_version"] = version.group(1)
    hip = re.search(r"^HIP\s*:?\s+(\d[\w.]*)\s*$", text, re.MULTILINE)
    if hip:
        report["hip"] = hip.group(1)
    return report


def gtt_limit_findings(cmdline: Optional[str], gtt_gib: Optional[float], ttm_in_effect_gib: Optional[float] = None,
                       ram_gib: Optional[float] = None, apu: bool = False, check: str = "unified-memory") -> list[Finding]:
    """The GTT limit the kernel command line asks for (ttm.pages_limit / amdttm.pages_limit, 4 KiB pages) against the
    GTT amdgpu reports (sysfs mem_info_gtt_total, dmesg's "M of GTT memory ready") or the TTM module's own parameter:
    in effect, or not taken (the other module's spelling, a boot loader not updated, no reboot)."""
    params = kernel_memory_params(cmdline or "")
    asked = params.get("ttm.pages_limit") or params.get("amdttm.pages_limit")
    seen = gtt_gib or ttm_in_effect_gib
    if cmdline is not None and not asked and apu and gtt_gib and ram_gib is None:   # with the RAM known: the checks above
        ram = 2 * gtt_gib
        target = suggested_gtt_gib(ram)
        guessed = f" (so about {ram:g} GiB of RAM)"
        if target and target > gtt_gib * 1.1:
            return [Finding.warn(check, f"the kernel command line sets no ttm.pages_limit: the APU's GTT is "
                                        f"{gtt_gib:g} GiB, the kernel's default of half the RAM{guessed}",
                                 "an APU trains in the GTT; HIP sizes its memory by the TTM limit (a 128 GB Strix Halo "
                                 "shows 62 GiB: ROCm/legacy-rocm-build #5595); amdgpu.gttsize does not raise it",
                                 f"add to the kernel command line: {gtt_kernel_arguments(target)} (then update-grub and "
                                 "reboot)")]
    if not asked or not seen:
        return []
    name = "ttm.pages_limit" if "ttm.pages_limit" in params else "amdttm.pages_limit"
    findings = []
    if abs(seen - asked) <= 0.02 * asked + 0.1:
        findings.append(Finding.info(check, f"{name} asks for {asked:g} GiB of GTT and the GPU has it: the limit is in "
                                            f"effect ({seen:g} GiB)"))
    elif seen < asked:
        findings.append(Finding.warn(check, f"the kernel command line asks for a {asked:g} GiB GTT ({name}), but the GPU "
                                            f"has {seen:g} GiB",
                                     "the limit did not take: AMD's DKMS driver reads amdttm.pages_limit, the kernel's "
                                     "own driver ttm.pages_limit; or the boot loader was not updated, or there was no "
                                     "reboot since",
                                     f"set both spellings: {gtt_kernel_arguments(asked)}; update-grub (or the boot "
                                     "loader's equivalent) and reboot; check with cat /sys/module/ttm/parameters/pages_limit"))
    if ram_gib is None:
        findings.append(Finding.info(check, "the RAM is not in the paste: whether the GTT leaves the OS enough is not "
                                            "checked", fix="paste grep MemTotal /proc/meminfo (or free -g) too"))
    return findings
