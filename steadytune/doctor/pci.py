"""Resizable BAR / Above 4G Decoding: how much of each GPU's memory the host can map.

A GPU exposes its memory to the CPU (and to other GPUs, for PCIe peer-to-peer) through a PCI BAR. Without
"Above 4G Decoding" and "Re-Size BAR" in the BIOS that window stays 256 MB whatever the card holds, so host <->
GPU copies are staged through it and ROCm's large-BAR peer-to-peer path is off; with both on, the window
covers all of the memory. AMD's BAR documentation: the frame-buffer BAR "will be the size of the GPU memory
(typically 4 GB+)" (ROCm docs/how-to/Bar-Memory.rst, ROCm/legacy-rocm-build PR #4065); amdgpu logs the same
as "Detected VRAM RAM=8176M, BAR=8192M", where "BAR=256M" means ReBAR is not working, and disabling CSM /
legacy boot is a common fix (ilya-zlobintsev/LACT #306).

Three readers, one verdict:
- live: /sys/bus/pci/devices/<bdf>/resource (start, end, flags per BAR) and the card's memory
  (amdgpu's mem_info_vram_total; torch's figure otherwise);
- saved `lspci -vv`: "Region N: Memory at ... (64-bit, prefetchable) [size=256M]" and the "Physical Resizable
  BAR" capability ("BAR 0: current size: 256MB, supported: 256MB ... 32GB");
- saved `dmesg`: amdgpu's "Detected VRAM RAM=...M, BAR=...M".
Paths are parameters so tests can use a fake /sys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from steadytune.doctor.findings import Finding

MIB, GIB = 2**20, 2**30
SMALL_WINDOW = 256 * MIB            # the BAR a card gets without ReBAR
VENDORS = {0x1002: "amd", 0x10DE: "nvidia", 0x8086: "intel"}
# PCI classes of GPUs: VGA (0x0300), 3D controller (0x0302), other display (0x0380), processing accelerator
# (0x1200, e.g. Instinct in some systems).
GPU_CLASSES = (0x0300, 0x0302, 0x0380, 0x1200)
IORESOURCE_MEM, IORESOURCE_PREFETCH, IORESOURCE_MEM_64 = 0x200, 0x2000, 0x100000


@dataclass
class Bar:
    index: int
    size: int                       # bytes
    prefetchable: bool = True
    is64: bool = True


@dataclass
class PciGpu:
    bdf: Optional[str]
    vendor: Optional[str] = None    # amd | nvidia | intel
    name: str = ""
    bars: list[Bar] = field(default_factory=list)
    resizable: dict[int, tuple[int, int]] = field(default_factory=dict)   # BAR -> (current, largest supported)
    memory: Optional[int] = None    # bytes of GPU memory, where known
    integrated: bool = False

    @property
    def label(self) -> str:
        return " ".join(p for p in (self.bdf or "", self.name) if p) or "GPU"


# --- reading ----------------------------------------------------------------------------------------------

_SIZE = re.compile(r"([\d.]+)\s*([KMGT])B?", re.IGNORECASE)


def _bytes(text: str) -> Optional[int]:
    match = _SIZE.fullmatch(text.strip())
    if not match:
        return None
    return int(float(match.group(1)) * {"K": 2**10, "M": MIB, "G": GIB, "T": 2**40}[match.group(2).upper()])


_LSPCI_HEADER = re.compile(r"^((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+([^:]+):\s*(.*)$")
_REGION = re.compile(r"Region (\d+): Memory at \S+ \((32|64)-bit, (non-)?prefetchable\)(?: \[[^\]]*\])* \[size=([^\]]+)\]")
_REBAR = re.compile(r"BAR (\d+): current size: (\S+), supported: (.*)$")
_GPU_CLASS_NAMES = ("VGA compatible controller", "3D controller", "Display controller", "Processing accelerators")


def looks_like_lspci(text: str) -> bool:
    return bool(re.search(r"Physical Resizable BAR|BAR \d+: current size:|^\s*Region \d+: Memory at", text, re.MULTILINE)) or \
        any(_LSPCI_HEADER.match(line) and any(c in line for c in _GPU_CLASS_NAMES) for line in text.splitlines())


def parse_lspci(text: str) -> list[PciGpu]:
    """GPUs in a saved `lspci -vv` (or an excerpt of it: a grep for "Resizable BAR" without the device line
    becomes one GPU without an address)."""
    gpus: list[PciGpu] = []
    current: Optional[PciGpu] = None
    for line in text.splitlines():
        header = _LSPCI_HEADER.match(line)
        if header:
            bdf, cls, name = header.groups()
            if any(c in cls for c in _GPU_CLASS_NAMES):
                vendor = next((v for k, v in (("Advanced Micro Devices", "amd"), ("NVIDIA", "nvidia"),
                                              ("Intel", "intel")) if k in name), None)
                current = PciGpu(bdf if bdf.count(":") == 2 else f"0000:{bdf}", vendor,
                                 re.sub(r"\s*\((rev|prog-if) [^)]*\)", "", name).strip())
                gpus.append(current)
            else:
                current = None
            continue
        if current is None and re.search(r"Physical Resizable BAR|BAR \d+: current size", line):
            current = PciGpu(None, name="GPU (its device line is not in the excerpt)")
            gpus.append(current)
        if current is None:
            continue
        region = _REGION.search(line)
        if region:
            size = _bytes(region.group(4))
            if size:
                current.bars.append(Bar(int(region.group(1)), size, region.group(3) is None, region.group(2) == "64"))
        rebar = _REBAR.search(line)
        if rebar:
            now = _bytes(rebar.group(2))
            supported = [b for b in (_bytes(s) for s in rebar.group(3).split()) if b]
            if now and supported:
                current.resizable[int(rebar.group(1))] = (now, max(supported))
    return gpus


_DMESG_BAR = re.compile(r"(?:amdgpu ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d): .*)?Detected VRAM RAM=(\d+)M, BAR=(\d+)M")


def parse_dmesg_bars(text: str) -> list[PciGpu]:
    """amdgpu's "Detected VRAM RAM=8144M, BAR=8192M" lines: memory and the BAR it got, per GPU."""
    gpus = []
    for match in _DMESG_BAR.finditer(text):
        bdf, ram, bar = match.groups()
        gpus.append(PciGpu(bdf, "amd", "" if bdf else "amdgpu (dmesg)", [Bar(0, int(bar) * MIB)], memory=int(ram) * MIB))
    return gpus


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None


def read_sysfs_gpus(sys_root: Path | str = "/sys") -> list[PciGpu]:
    """GPUs on this machine's PCI bus, with the BARs the kernel assigned (resource file: one 'start end flags'
    line per BAR) and, for amdgpu, the card's memory."""
    gpus = []
    for device in sorted(Path(sys_root, "bus", "pci", "devices").glob("*")):
        cls = _read(device / "class")
        vendor = _read(device / "vendor")
        # AMD and NVIDIA only: a server's BMC display (ASPEED) or a CPU's iGPU would only add noise here
        if cls is None or vendor is None or int(cls, 16) >> 8 not in GPU_CLASSES or int(vendor, 16) not in (0x1002, 0x10DE):
            continue
        gpu = PciGpu(device.name, VENDORS.get(int(vendor, 16)))
        for index, line in enumerate((_read(device / "resource") or "").splitlines()[:6]):
            try:
                start, end, flags = (int(x, 16) for x in line.split()[:3])
            except ValueError:
                continue
            if start and end > start and flags & IORESOURCE_MEM:
                gpu.bars.append(Bar(index, end - start + 1, bool(flags & IORESOURCE_PREFETCH), bool(flags & IORESOURCE_MEM_64)))
        vram = _read(device / "mem_info_vram_total")
        gpu.memory = int(vram) if vram and vram.strip().isdigit() else None
        gpus.append(gpu)
    return gpus


# --- the verdict --------------------------------------------------------------------------------------------

def _fmt(size: int) -> str:
    return f"{size / GIB:.3g} GB" if size >= GIB else f"{size // MIB} MB"


def memory_window(gpu: PciGpu) -> tuple[Optional[int], Optional[int]]:
    """(current size, largest possible) of the BAR that maps GPU memory: the resizable BAR with the largest
    supported size, else the largest 64-bit prefetchable region."""
    if gpu.resizable:
        return max(gpu.resizable.values(), key=lambda cur_max: cur_max[1])
    windows = [b.size for b in gpu.bars if b.prefetchable]
    return (max(windows), None) if windows else (None, None)


def rebar_state(gpu: PciGpu) -> tuple[str, str]:
    """-> (on | off | partial | unknown, the numbers behind it)."""
    current, largest = memory_window(gpu)
    if current is None:
        return "unknown", "no memory BAR found"
    memory = gpu.memory
    numbers = f"BAR {_fmt(current)}" + (f" of up to {_fmt(largest)}" if largest else "") + \
              (f", GPU memory {_fmt(memory)}" if memory else "")
    if memory and current >= memory * 0.98 or largest and current >= largest:
        return "on", numbers
    if current <= SMALL_WINDOW and (largest and largest > current or memory and memory > current):
        return "off", numbers
    if current <= SMALL_WINDOW:
        return "unknown", numbers + "; 256 MB means ReBAR is off on any card with more memory"
    if memory or largest:
        return "partial", numbers
    return "on", numbers + "; a window above 256 MB needs Above 4G Decoding and ReBAR"


BIOS_FIX = ("in the BIOS/UEFI enable 'Above 4G Decoding' and 'Re-Size BAR Support' (and disable CSM / legacy boot, "
            "which keeps BARs small); check with `sudo lspci -vv -s <bdf> | grep -A3 'Resizable BAR'` or "
            "`sudo dmesg | grep 'Detected VRAM'`")


def rebar_findings(gpus: list[PciGpu], check: str = "pci") -> list[Finding]:
    findings = []
    for gpu in gpus:
        if gpu.integrated:
            continue        # an APU's "VRAM" is system memory already; its BAR says nothing
        state, numbers = rebar_state(gpu)
        if state == "on":
            findings.append(Finding.info(check, f"{gpu.label}: Resizable BAR on ({numbers})"))
        elif state == "off":
            findings.append(Finding.warn(
                check, f"{gpu.label}: Resizable BAR / Above 4G Decoding is off ({numbers})",
                "the host sees the GPU's memory through a 256 MB window: host<->GPU copies are staged through it "
                "(slower loading and offloading), and PCIe peer-to-peer between GPUs, which maps the peer's memory "
                "through this BAR (ROCm's large-BAR P2P), is unavailable: collectives go through host memory",
                BIOS_FIX))
        elif state == "partial":
            findings.append(Finding.info(check, f"{gpu.label}: Resizable BAR partly on ({numbers})",
                                         "the window is larger than 256 MB but smaller than the card's memory",
                                         BIOS_FIX))
        else:
            findings.append(Finding.info(check, f"{gpu.label}: BAR size not conclusive ({numbers})"))
    return findings
