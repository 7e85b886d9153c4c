"""GPU ids as data: PCI vendor:device ids (and the VBIOS part numbers amdgpu prints) -> the card's model, architecture,
memory and whether it is an integrated GPU. The table is gpu_ids.tsv beside this module, each column with its source
(names verbatim from the PCI ID database); a table that shows only ids (rocm-smi's concise and --showhw views, rocminfo's
Chip ID, sysfs, `lspci -n`, dmesg) still says which cards these are, and `doctor` what each gets.

Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

TABLE = Path(__file__).with_name("gpu_ids.tsv")
AMD, NVIDIA = 0x1002, 0x10DE


@dataclass(frozen=True)
class GpuId:
    vendor: int
    device: int
    name: str                     # the PCI ID database's name (or the VBIOS row's)
    arch: str                     # gfx target or sm_XY
    memory_gib: Optional[float]   # per device as torch sees it; None where the id covers several boards, or an APU
    kind: str                     # instinct | datacenter | dgpu | igpu
    vbios: Optional[str] = None   # a part-number prefix ("102-RAPHAEL")

    @property
    def integrated(self) -> bool:
        return self.kind == "igpu"

    @property
    def vendor_name(self) -> str:
        return "amd" if self.vendor == AMD else "nvidia" if self.vendor == NVIDIA else f"{self.vendor:04x}"


@lru_cache(maxsize=1)
def _rows() -> tuple[GpuId, ...]:
    rows = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        vendor, device, vbios, arch, memory, kind, name = line.split("\t")
        rows.append(GpuId(int(vendor, 16), int(device, 16), name, arch, None if memory == "-" else float(memory), kind,
                          None if vbios == "-" else vbios.upper()))
    return tuple(rows)


def lookup_id(device: Optional[int], vendor: Optional[int] = None, vbios: Optional[str] = None) -> Optional[GpuId]:
    """The row for a device id (vendor AMD unless given), a VBIOS row first where the VBIOS string starts with its
    prefix; a VBIOS string alone finds its row too. None when neither is in the table."""
    vbios = (vbios or "").strip().upper()
    rows = _rows()
    if vbios:
        by_vbios = [r for r in rows if r.vbios and vbios.startswith(r.vbios)
                    and (device is None or r.device == device)]
        if by_vbios:
            return by_vbios[0]
    if device is None:
        return None
    vendors = (vendor,) if vendor is not None else (AMD, NVIDIA)
    for wanted in vendors:
        found = next((r for r in rows if r.device == device and r.vendor == wanted and r.vbios is None), None)
        if found is not None:
            return found
    return None


def amd_name(device: int) -> Optional[str]:
    row = lookup_id(device, AMD)
    return row.name if row else None


_PCI_PAIR = re.compile(r"\b(?:0x)?(1002|10de):(?:0x)?([0-9a-f]{4})\b", re.IGNORECASE)


def ids_in(text: str) -> list[tuple[int, int]]:
    """(vendor, device) pairs written as `1002:744c` or `0x1002:0x744C` (lspci -n, dmesg's IP DISCOVERY line, kfd's
    'skipped device 1002:67df'), in order, each once."""
    seen: list[tuple[int, int]] = []
    for match in _PCI_PAIR.finditer(text):
        pair = (int(match.group(1), 16), int(match.group(2), 16))
        if pair not in seen:
            seen.append(pair)
    return seen
