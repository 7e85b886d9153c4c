"""Live checks of the hardware around the GPU: what each AMD architecture gets (archs.py, from the tables in
gpu_facts.py), gradient checkpointing for this GPU's memory (plan.py, train's own rule), an APU's unified
memory (memory.py) and Resizable BAR (pci.py). Each takes the `Probe` and returns findings."""

from __future__ import annotations

from steadytune.doctor.archs import arch_findings, torch_rocm
from steadytune.doctor.findings import Finding
from steadytune.doctor.memory import apu_memory_findings
from steadytune.doctor.pci import read_sysfs_gpus, rebar_findings
from steadytune.doctor.plan import checkpointing_findings
from steadytune.doctor.probe import Probe
from steadytune.hardware.unified_memory import card_for, read_cmdline, read_drm_cards, system_memory_gib


def check_archs(probe: Probe) -> list[Finding]:
    """Per AMD GPU: bf16/fp8, the SDPA path (and the AOTriton switch where it is experimental), HSA override.
    Wheel coverage is check_arch_coverage's job here (it asks this torch), so only the rest is added."""
    findings = []
    seen = set()
    for gpu in probe.info.gpus or []:
        if not gpu.arch.startswith("gfx") or gpu.arch in seen:
            continue
        seen.add(gpu.arch)
        findings += [f for f in arch_findings(gpu.arch, f"GPU {gpu.index}", "arch", compiled=probe.arch_list or None,
                                              torch_version=probe.torch_version,
                                              rocm=torch_rocm(probe.torch_version, probe.hip_version))
                     if "target of this torch" not in f.what and "has no working code" not in f.what]
    if probe.env.get("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL") == "1":
        findings = [f for f in findings if "AOTRITON" not in f.fix]
        findings.append(Finding.info("arch", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1: AOTriton's experimental "
                                             "architectures use the fused SDPA kernels"))
    return findings


def check_train_plan(probe: Probe) -> list[Finding]:
    """Gradient checkpointing for this GPU's memory (dtype, attention and packing have their own checks)."""
    return checkpointing_findings(probe.info, None, "memory")


def check_unified_memory(probe: Probe) -> list[Finding]:
    """An APU's usable memory (GTT) from sysfs and the kernel command line, and how to raise it."""
    apus = [g for g in probe.info.gpus if g.integrated and g.arch.startswith("gfx")]
    if not apus:
        return []
    cards = read_drm_cards(probe.sys_root)
    cmdline = read_cmdline(probe.proc_root)
    ram = system_memory_gib(probe.proc_root)
    findings = []
    for gpu in apus:
        card = card_for(cards, gpu.bus_id)
        findings += apu_memory_findings(f"GPU {gpu.index} ({gpu.arch})", "unified-memory", torch_gib=gpu.memory_gib,
                                        vram_gib=card.vram_gib if card else None, gtt_gib=card.gtt_gib if card else None,
                                        cmdline=cmdline, ram_gib=ram)
    return findings


def check_rebar(probe: Probe) -> list[Finding]:
    """Resizable BAR of each GPU on the PCI bus (sysfs), against the card's memory."""
    pci = read_sysfs_gpus(probe.sys_root)
    by_bus = {g.bus_id: g for g in probe.info.gpus if g.bus_id}
    for gpu in pci:
        torch_gpu = by_bus.get(gpu.bdf)
        if gpu.memory is None and torch_gpu is not None:
            gpu.memory = int(torch_gpu.memory_gib * 2**30)
        gpu.integrated = bool(torch_gpu and torch_gpu.integrated) or (gpu.memory is not None and gpu.memory < 2**30
                                                                       and gpu.vendor == "amd")
        if torch_gpu is not None and not gpu.name:
            gpu.name = torch_gpu.name
    return rebar_findings(pci, "pci")
