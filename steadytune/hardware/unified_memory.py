"""How much memory an AMD APU's GPU can really use, and how to raise it.

An APU (Strix Halo's Radeon 8060S, Strix Point's 890M) has no memory of its own: the BIOS carves out a "VRAM"
share of system RAM (often 512 MB), and the GPU can map more system RAM through the GTT, whose size the kernel
sets: `ttm.pages_limit` (4 KiB pages; `amdttm.pages_limit` for AMD's DKMS driver) and the older
`amdgpu.gttsize` (MiB, deprecated by the kernel in favour of ttm.pages_limit). Tools print the carve-out; the
GTT is what a 64-128 GB machine trains in. The amdgpu driver publishes both per card in sysfs
(`/sys/class/drm/cardN/device/mem_info_vram_total`, `mem_info_gtt_total`, bytes).

Sources: the kernel's own message "Configuring gttsize via module parameter is deprecated, please use
ttm.pages_limit" and a working Strix Halo set-up with `ttm.pages_limit=32768000` giving "128000M of GTT memory
ready" (ROCm/ROCm #5671); the amdgpu sysfs files (kernel docs, drm/amdgpu "mem_info_*").

Paths are parameters so tests can point them at a fake /sys and /proc.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

PAGE = 4096
GIB = 2**30
AMD_VENDOR = 0x1002


@dataclass
class DrmCard:
    card: str                           # card0
    bdf: Optional[str]                  # 0000:c5:00.0
    vendor: Optional[int]
    vram_gib: Optional[float]           # carve-out on an APU, the card's memory on a dGPU
    visible_vram_gib: Optional[float]   # VRAM the CPU can map (the BAR window on a dGPU)
    gtt_gib: Optional[float]            # system memory the GPU can map


def _read_int(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().strip(), 0)
    except (OSError, ValueError):
        return None


def _gib(value: Optional[int]) -> Optional[float]:
    return round(value / GIB, 2) if value is not None else None


def read_drm_cards(sys_root: Path | str = "/sys") -> list[DrmCard]:
    """Every GPU the DRM subsystem lists (card0, card1, ...; connectors such as card0-DP-1 skipped)."""
    cards = []
    for card in sorted(Path(sys_root, "class", "drm").glob("card*")):
        if not re.fullmatch(r"card\d+", card.name):
            continue
        device = card / "device"
        try:
            bdf = device.resolve().name if device.is_symlink() else None
        except OSError:
            bdf = None
        bdf = bdf if bdf and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", bdf) else None
        cards.append(DrmCard(card.name, bdf, _read_int(device / "vendor"),
                             _gib(_read_int(device / "mem_info_vram_total")),
                             _gib(_read_int(device / "mem_info_vis_vram_total")),
                             _gib(_read_int(device / "mem_info_gtt_total"))))
    return cards


# Kernel parameters that size the GTT, and what one unit is worth in bytes.
GTT_PARAMETERS = {"ttm.pages_limit": PAGE, "amdttm.pages_limit": PAGE, "ttm.page_pool_size": PAGE,
                  "amdttm.page_pool_size": PAGE, "amdgpu.gttsize": 2**20}


def kernel_memory_params(cmdline: str) -> dict[str, float]:
    """The GTT-sizing parameters on a kernel command line -> {name: GiB}."""
    found = {}
    for name, unit in GTT_PARAMETERS.items():
        match = re.search(rf"(?:^|\s){re.escape(name)}=(\d+)", cmdline)
        if match:
            found[name] = round(int(match.group(1)) * unit / GIB, 2)
    return found


def read_cmdline(proc_root: Path | str = "/proc") -> Optional[str]:
    try:
        return Path(proc_root, "cmdline").read_text()
    except OSError:
        return None


def system_memory_gib(proc_root: Path | str = "/proc") -> Optional[float]:
    try:
        text = Path(proc_root, "meminfo").read_text()
    except OSError:
        return None
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return round(int(match.group(1)) * 1024 / GIB, 1) if match else None


def looks_like_ttm_default(torch_gib: Optional[float], gtt_gib: Optional[float], ram_gib: Optional[float]) -> bool:
    """torch reports about half of RAM while the GTT is larger: the TTM page limit (ttm.pages_limit) is still at its
    default of half the RAM, and HIP sizes the APU's memory by it (a 128 GB Strix Halo: 62.47 of 128 GiB with
    amdgpu.gttsize=131072 set, which is deprecated and does not raise the TTM limit; unsloth PR #7960, #7878)."""
    if not (torch_gib and gtt_gib and ram_gib):
        return False
    return torch_gib < 0.75 * gtt_gib and abs(torch_gib - ram_gib / 2) <= 0.06 * ram_gib


def usable_gib(torch_total_gib: Optional[float], card: Optional[DrmCard],
               ram_gib: Optional[float] = None) -> tuple[Optional[float], str]:
    """What an APU's GPU can allocate: the larger of what torch reports, the carve-out and the GTT (HIP
    allocates from either pool; which one torch counts depends on the ROCm version), with two limits: when torch's
    figure is the TTM default (half of RAM) it is what HIP allocates, and the GTT share leaves the OS its headroom
    (suggested_gtt_gib). -> (GiB, how it was read)."""
    figures = {"torch": torch_total_gib, "VRAM carve-out": card.vram_gib if card else None,
               "GTT": card.gtt_gib if card else None}
    known = {k: v for k, v in figures.items() if v}
    if not known:
        return None, "no memory figure"
    source, value = max(known.items(), key=lambda kv: kv[1])
    parts = ", ".join(f"{k} {v:g} GiB" for k, v in known.items())
    if looks_like_ttm_default(torch_total_gib, figures["GTT"], ram_gib):
        return torch_total_gib, f"torch ({parts}; the TTM limit is at its default, half of {ram_gib:g} GiB RAM)"
    cap = suggested_gtt_gib(ram_gib)
    carve_out = figures["VRAM carve-out"] or 0
    from_ram = source == "GTT" or (source == "torch" and abs(value - carve_out) > 0.05 * value)   # not the carve-out
    if from_ram and cap and value > cap:   # the carve-out is outside MemTotal; the GTT is the OS's own RAM
        return cap, f"GTT less the OS's share ({parts}; {ram_gib:g} GiB RAM)"
    return value, f"{source} ({parts})"


def gtt_kernel_arguments(target_gib: float) -> str:
    """Kernel command-line arguments that let the GPU map `target_gib` of system memory (both spellings: the
    in-kernel ttm module and AMD's DKMS amdttm)."""
    pages = int(target_gib * GIB // PAGE)
    return (f"ttm.pages_limit={pages} ttm.page_pool_size={pages} "
            f"amdttm.pages_limit={pages} amdttm.page_pool_size={pages}")


def suggested_gtt_gib(ram_gib: Optional[float]) -> Optional[float]:
    """Leave the OS 8 GiB (at least an eighth of RAM); the rest may be mapped by the GPU."""
    if not ram_gib:
        return None
    return float(int(ram_gib - max(8.0, ram_gib / 8)))


def card_for(cards: list[DrmCard], bdf: Optional[str]) -> Optional[DrmCard]:
    """The DRM card of a PCI address; without an address, the only AMD card with a GTT figure, if just one."""
    if bdf:
        for card in cards:
            if card.bdf and card.bdf.lower() == bdf.lower():
                return card
    amd = [c for c in cards if c.vendor == AMD_VENDOR and c.gtt_gib]
    return amd[0] if len(amd) == 1 else None
