"""The machine as torch sees it: backend (cuda, rocm, mps, cpu), its GPUs with architecture, memory and bus
address, and the device a run uses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from steadytune.hardware.gpu_facts import arch_info, lookup_product, normalise_gfx
from steadytune.hardware.unified_memory import card_for, read_drm_cards, system_memory_gib, usable_gib

if TYPE_CHECKING:
    import torch


# torch is imported inside the functions that need it: the tables and arch rules below also serve
# `steadytune doctor --from` on saved tool outputs, which must work where torch itself does not import.
# The product, architecture and wheel tables are data in gpu_facts.py, each row with its source; this module
# turns them into decisions (names re-exported above because doctor, bench and smi_parsers import them here).


@dataclass
class GPU:
    index: int
    name: str
    arch: str                  # gfx90a / gfx942 / gfx1100 on ROCm; sm_90 on CUDA
    memory_gib: float          # as torch reports it
    integrated: bool = False   # APU / iGPU: trains only when it is the only GPU and worth it (gpu_facts.Arch)
    bus_id: Optional[str] = None              # PCI address, 0000:c5:00.0
    usable_memory_gib: Optional[float] = None  # APU: carve-out or GTT, whichever is larger (unified_memory.py)
    memory_note: str = ""

    @property
    def budget_gib(self) -> float:
        """The memory train plans with: the usable figure of an APU, else what torch reports."""
        return self.usable_memory_gib or self.memory_gib


@dataclass
class HardwareInfo:
    backend: str               # rocm | cuda | mps | cpu
    torch_version: str
    hip_version: Optional[str] = None
    cuda_version: Optional[str] = None
    gpus: list[GPU] = field(default_factory=list)

    @property
    def primary(self) -> Optional[GPU]:
        """The GPU train uses: the first discrete one; else an APU of an architecture worth training on (Strix
        Halo with 64-128 GB shared); never a small iGPU next to a discrete card (rocm.md row 5)."""
        discrete = [g for g in self.gpus if not g.integrated]
        if discrete:
            return discrete[0]
        apus = [g for g in self.gpus if (row := arch_info(g.arch)) is not None and row.apu_trains]
        return apus[0] if apus else None

    def to_dict(self) -> dict:
        return asdict(self)


def detect_backend() -> str:
    import torch
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def detect(sys_root: str | Path = "/sys", proc_root: str | Path = "/proc") -> HardwareInfo:
    """What this process can use, as torch sees it (after *_VISIBLE_DEVICES have been applied). An APU's usable
    memory comes from the driver's GTT figure in sysfs, since torch may report only the small carve-out."""
    import torch
    backend = detect_backend()
    info = HardwareInfo(backend=backend, torch_version=torch.__version__,
                        hip_version=getattr(torch.version, "hip", None), cuda_version=torch.version.cuda)
    if backend in ("rocm", "cuda"):
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            if backend == "rocm":
                arch = normalise_gfx(getattr(props, "gcnArchName", "") or "")
            else:
                arch = f"sm_{props.major}{props.minor}"
            product = lookup_product(props.name)
            integrated = bool(getattr(props, "is_integrated", False)) or bool(product and product.integrated)
            info.gpus.append(GPU(index=i, name=props.name, arch=arch, bus_id=_bus_id(props),
                                 memory_gib=round(props.total_memory / 2**30, 1), integrated=integrated))
        if backend == "rocm" and any(g.integrated for g in info.gpus):
            cards = read_drm_cards(sys_root)
            ram = system_memory_gib(proc_root)
            for gpu in info.gpus:
                if gpu.integrated:
                    gpu.usable_memory_gib, gpu.memory_note = usable_gib(gpu.memory_gib, card_for(cards, gpu.bus_id), ram)
    return info


def _bus_id(props) -> Optional[str]:
    """PCI address from torch's device properties (pci_domain_id/pci_bus_id/pci_device_id), if it has them."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(p, int) for p in parts):
        return None
    domain, bus, device = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def device_for(info: HardwareInfo) -> torch.device:
    import torch
    if info.backend in ("rocm", "cuda"):
        # The current device (each rank's own under Accelerate), unless device 0 is an iGPU enumerated before
        # the discrete GPU (rocm.md row 5): then the first discrete GPU.
        gpu = info.primary
        if gpu is not None and info.gpus and info.gpus[0].integrated:
            return torch.device("cuda", gpu.index)
        return torch.device("cuda")
    if info.backend == "mps":
        return torch.device("mps")
    return torch.device("cpu")
