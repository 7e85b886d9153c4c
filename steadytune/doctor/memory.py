"""APU unified memory in doctor: what the GPU of a Strix Halo / Strix Point machine can really use (its GTT,
not the small carve-out the tools print), read live from sysfs and the kernel command line or from a saved
`dmesg`, and the kernel parameters that raise it. The figures and parameters are hardware/unified_memory.py's; this
module turns them into findings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from steadytune.doctor.findings import Finding
from steadytune.hardware.unified_memory import gtt_kernel_arguments, kernel_memory_params, suggested_gtt_gib

_READY = re.compile(r"(?:amdgpu ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d): .*?)?(\d+)M of (VRAM|GTT) memory ready")
_CMDLINE = re.compile(r"(?:Kernel command line|Command line): (.*)$", re.MULTILINE)


@dataclass
class KernelLog:
    """What a saved `dmesg` says about GPU memory."""
    vram_gib: dict[Optional[str], float] = field(default_factory=dict)   # PCI address (or None) -> GiB
    gtt_gib: dict[Optional[str], float] = field(default_factory=dict)
    cmdline: Optional[str] = None
    gttsize_deprecated: bool = False


def looks_like_dmesg(text: str) -> bool:
    return bool(re.search(r"^\s*\[\s*\d+\.\d+\]", text, re.MULTILINE)) and \
        bool(re.search(r"amdgpu|\[drm\]|Command line", text))


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
        best = max(known, key=known.get)
        findings.append(Finding.info(check, f"{label}: the GPU can use {known[best]:g} GiB of unified memory (the "
                                            "largest of " + ", ".join(f"{k} {v:g} GiB" for k, v in known.items()) + ")",
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
