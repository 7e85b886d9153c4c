"""Two AMD GPUs that cannot reach each other: rocm-bandwidth-test's access matrix ("Inter-Device Access", older
releases "Device Access") with 0 between two GPUs, and N/A for their copy bandwidth. Peer-to-peer DMA between AMD GPUs
needs the kernel driver built with it (CONFIG_HSA_AMD_P2P, with CONFIG_PCI_P2PDMA and CONFIG_DMABUF_MOVE_NOTIFY):
many distributions' kernels build amdgpu without it, and then every GPU pair reads as no peer and copies go through
host memory; AMD's own kernel driver (amdgpu-dkms from the ROCm repository) has it.

Sources: ROCm/legacy-rocm-build#2253 (two RX 7900 XTX without peer access on the distribution's amdgpu, solved by
installing amdgpu-dkms); AMD's Instinct amdgpu docs, "IOMMU" page (the kernel options GPU P2P DMA needs), quoted in
siderolabs/pkgs#1488; ROCm/amdgpu#210 (CONFIG_HSA_AMD_P2P compiled out on mainline kernels)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_MATRIX_TITLE = re.compile(r"(?i)^\s*(?:Inter-)?Device Access\s*$")
_DEVICE = re.compile(r"(?i)^\s*Device:\s*(\d+),\s*([^,\n]+)(,.*)?$")
_GPU_NAME = re.compile(r"(?i)\bGPU-|Radeon|Instinct|\bMI\d{2,3}|\bgfx\d|\bVega\b|\bNavi\b|FirePro")


def _gpus(ctx: Context) -> dict[int, str]:
    found = {}
    for line in ctx.sheet.lines:
        m = _DEVICE.match(line)
        if m and _GPU_NAME.search(m.group(2) + (m.group(3) or "")):
            found[int(m.group(1))] = m.group(2).strip()
    return found


def _no_peer_pairs(ctx: Context) -> tuple[list[tuple[int, int]], int]:
    """The GPU pairs the access matrix marks 0, and the matrix's title line."""
    lines = ctx.sheet.lines
    gpus = _gpus(ctx)
    for n, line in enumerate(lines):
        if not _MATRIX_TITLE.match(line):
            continue
        pairs = []
        for row in lines[n + 1:n + 2 + 2 * (len(gpus) + 2)]:
            cells = row.split()
            if not cells or not all(re.fullmatch(r"\d+", c) for c in cells) or len(cells) < 3:
                continue
            source = int(cells[0])
            for target, value in enumerate(cells[1:]):
                if value == "0" and source in gpus and target in gpus and source != target:
                    pairs.append((min(source, target), max(source, target)))
        return sorted(set(pairs)), n + 1
    return [], 0


@rule("driver")
def gpus_without_peer_access(ctx: Context) -> Optional[Diagnosis]:
    pairs, title = _no_peer_pairs(ctx)
    if not pairs:
        return None
    gpus = _gpus(ctx)
    names = ", ".join(f"{a} and {b}" for a, b in pairs[:3])
    dkms = re.search(r"(?i)amdgpu-dkms\b[^\n]{0,40}\binstall", _text(ctx))
    fix = ("install AMD's kernel driver, which is built with GPU peer-to-peer: sudo amdgpu-install --usecase=dkms (or "
           "sudo apt install amdgpu-dkms from the ROCm repository), reboot, and run rocm-bandwidth-test again (the "
           "access matrix must read 1 between the GPUs); a distribution kernel shows whether its own amdgpu has it: "
           "grep -E 'HSA_AMD_P2P|PCI_P2PDMA|DMABUF_MOVE_NOTIFY' /boot/config-$(uname -r)")
    if dkms:
        fix = ("with amdgpu-dkms in place: enable Above 4G decoding and Resizable BAR in the firmware, boot with "
               "iommu=pt (or the IOMMU off), and keep both GPUs under one CPU's PCIe root (lspci -tv); " + fix)
    said = _lines_matching(ctx, _MATRIX_TITLE)
    return _make("driver", f"GPUs {names} have no peer access",
                 f"rocm-bandwidth-test's access matrix marks GPUs {names} ({', '.join(sorted(set(gpus.values())))}) as "
                 "unable to reach each other, and their copies go through host memory: the kernel driver in use was "
                 "built without GPU peer-to-peer DMA (CONFIG_HSA_AMD_P2P), as many distributions' in-kernel amdgpu is",
                 fix, [], said[:1])
