"""The platform under the GPU: PCIe atomics an old card needs, the BIOS's BAR settings, an idle card asleep
in runtime power management."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (_arch_fact, _catalogue, Context, Diagnosis, _first, _lines_matching, _make,
                                          NOT_DETECTED, _restate, rule, _text)


# GCN cards whose ROCm support needed PCIe atomics (gfx8: Fiji, Polaris); ROCm dropped them after 4.x
_NEEDS_ATOMICS = ("gfx801", "gfx802", "gfx803", "gfx805", "gfx810")


def _atomics_for_an_old_release(ctx: Context) -> Optional[Diagnosis]:
    """A Polaris / Fiji card that a ROCm release of its time (before 4.5, which still listed gfx8) does not find: not
    the GPU's support, which that release had, but the platform's PCIe atomics, which gfx8 needs and KFD checks."""
    archs = [a for a in ctx.sheet.machine_archs if a in _NEEDS_ATOMICS]
    release = re.search(r"(?i)\bROCm ?(\d)\.(\d+)", _text(ctx))
    if not archs or not release or (int(release.group(1)), int(release.group(2))) >= (4, 5):
        return None
    unseen = _lines_matching(ctx, NOT_DETECTED)
    if not unseen:
        return None
    return _first(_make("platform-bios", f"the {archs[0]} card is skipped: its PCIe path likely has no atomics",
                        f"ROCm {release.group(1)}.{release.group(2)} supports {archs[0]}, yet finds only the CPU; "
                        f"{archs[0]} (Polaris / Fiji) needs PCIe atomic operations from CPU and board, and KFD skips "
                        "the card where the platform lacks them (sudo dmesg | grep -i atomics shows 'PCI rejects "
                        "atomics')",
                        "check sudo dmesg | grep -i -e kfd -e atomic; put the card in a CPU-attached x16 slot (no "
                        "riser or chipset lanes); where the CPU has no PCIe atomics at all (Intel before Haswell, AMD "
                        "before Zen) ROCm cannot use this card there: another platform, or a gfx9+ card that does not "
                        "need them", [_arch_fact(ctx, archs[0])], unseen))


# the BIOS leaving the card's memory unmapped, said or shown: Above 4G Decoding / Resizable BAR off, a 256 MB BAR
_BAR_OFF = re.compile(r"(?i)(?:resizable|large|re-?size) ?BAR\W{0,3}(?:is |was |=|:)?\s*(?:off|disabled|not (?:enabled|"
                      r"supported|available))|(?:disabled?|turned off|without|no) (?:the )?(?:resizable|re-?size) ?BAR|"
                      r"Above ?4G(?: Decoding)?\W{0,3}(?:is |was |=|:)?\s*(?:off|disabled)|(?:disabled?|turned off|"
                      r"without|no) (?:the )?Above ?4G|关闭.{0,6}(?:Above ?4G|Resizable ?BAR|ReBAR)|(?:Above ?4G|Resizable "
                      r"?BAR|ReBAR).{0,6}(?:关闭|未开启|没开)")
_BAR_INIT_FAILS = re.compile(r"(?i)Fatal error during GPU init|amdgpu.{0,60}probe.{0,40}fail\w*|RmInitAdapter failed|"
                             r"\bBAR \d+: (?:no space|failed to assign)|Not enough PCI address space|"
                             r"(?:fail\w*|unable|can.t|cannot) (?:to )?(?:initiali[sz]e|init) (?:the )?(?:GPU|device)")


def _bar_at_init(ctx: Context) -> Optional[Diagnosis]:
    """The GPU failing to initialise where the BIOS is said to leave Above 4G Decoding / Resizable BAR off: the
    driver's init failure is the symptom, the unmapped memory window the cause (a card with 16 GB or more of VRAM, an
    NVIDIA data-centre card, a second large card: each wants a 64-bit memory window above 4 GB)."""
    failed = _lines_matching(ctx, _BAR_INIT_FAILS.pattern)
    said = _lines_matching(ctx, _BAR_OFF.pattern)
    if not failed or not said:
        return None
    return _first(_make("platform-bios", "the BIOS does not map the GPU's memory, so its init fails",
                        "the GPU's driver fails to initialise it while Above 4G Decoding / Resizable BAR is off: the "
                        "card's memory window (BAR) needs 64-bit address space above 4 GB, which the BIOS then does "
                        "not give",
                        "enable Above 4G Decoding and Resizable BAR in the BIOS (CSM / legacy boot off, UEFI boot), "
                        "then boot and check sudo dmesg | grep -i -e BAR -e amdgpu -e NVRM (amdgpu prints the BAR size "
                        "it got: 'Detected VRAM RAM=... BAR=...'); update the BIOS if it has no such option",
                        [], failed + said))


# rocm-smi / amd-smi reading a GPU's sysfs files while the GPU sleeps in runtime power management (D3): the files
# answer empty ("Expected integer value from monitor, but got \"\""), the table shows N/A; typical of idle cards
_MONITOR_EMPTY = re.compile(r"Expected integer value from monitor, but got")
_IDLE_SAID = re.compile(r"(?i)\bidle\b|after (?:a (?:while|period)|some time|\d+ ?(?:min|hour))|\b(?:runtime )?suspend|"
                        r"\bD3(?:cold|hot)?\b|空闲|一段时间")
_SMI_ROW_NA = re.compile(r"^\s*\d+\s+\d+\s+0x[0-9a-f]{4}.*\bN/A\s+N/A\b")


def _runtime_suspended(ctx: Context) -> Optional[Diagnosis]:
    """The SMI tool reading nothing from cards that runtime power management put to sleep: the sysfs files of a
    suspended device answer empty; waking them (power/control "on") or turning runtime PM off is the remedy."""
    empty = _lines_matching(ctx, _MONITOR_EMPTY.pattern)
    rows = [e for e in _lines_matching(ctx, _SMI_ROW_NA.pattern)] if _IDLE_SAID.search(_text(ctx)) else []
    if not empty and not rows:
        return None
    made = _make("platform-bios", "the idle GPUs are asleep in runtime power management",
                 "rocm-smi reads the GPUs' sysfs files; a card that runtime power management put to sleep (D3) "
                 "answers them empty, so the values come back blank or N/A",
                 "wake the cards and keep them awake: echo on | sudo tee /sys/bus/pci/drivers/amdgpu/*/power/control "
                 "(then rocm-smi reads them again); to keep it across reboots add amdgpu.runpm=0 to the kernel command "
                 "line (GRUB_CMDLINE_LINUX, update-grub, reboot) or a udev rule that sets power/control to on",
                 [], empty + rows, confirmed=bool(empty))
    # the SMI's own empty-read message settles it before any driver reading of the same N/A table
    return _first(made) if empty else made


@rule("platform-bios")
def platform_bios(ctx: Context) -> Optional[Diagnosis]:
    bar = _bar_at_init(ctx) or _runtime_suspended(ctx)
    if bar is not None:
        return bar
    errors = ctx.of("platform-bios")
    if not errors:
        return _atomics_for_an_old_release(ctx)
    text = " ".join(e.line for e in errors)
    if re.search(r"(?i)atomic", text):
        pci = next((f for f in ctx.sheet.of("pci_id") if f.line_no in {e.line_no for e in errors}), None)
        card = f" ({pci.value}{', ' + pci.detail if pci.detail else ''})" if pci else ""
        return _make("platform-bios", f"the GPU{card} is skipped: its PCIe path has no atomics",
                     "ROCm's compute queues on GCN cards (gfx8) need PCIe atomic operations all the way to the CPU; a "
                     "chipset slot, a riser, a Thunderbolt/OCuLink enclosure or an old platform without them makes "
                     "KFD skip the card",
                     "put the card in a CPU-attached x16 slot (no riser, no chipset lanes; lspci -vvv shows "
                     "AtomicOpsCap); where the CPU or board has no PCIe atomics at all (Intel before Haswell, AMD "
                     "before Zen, many laptops' chipset links) ROCm cannot use this card: a platform with PCIe 3 "
                     "atomics, or a gfx9+ card, which does not need them", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)fallen off the bus|\bXid\b\W{0,3}(?:\([^)]*\)\W{0,3})?79\b", text):
        return _make("platform-bios", "the GPU fell off the PCIe bus",
                     "the GPU stopped answering on PCIe mid-run (NVIDIA's Xid 79): power (a transient the PSU or its "
                     "cables do not hold), the PCIe link (a riser, a loose card, link power saving) or heat",
                     "check power first (a PSU with headroom, separate PCIe cables per connector; a lower power limit to "
                     "confirm: sudo nvidia-smi -pl <watts>), reseat the card without a riser, set the slot's PCIe "
                     "generation fixed in the BIOS, and add pcie_aspm=off to the kernel command line; watch temperatures",
                     [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)data ?parallel|all (?:two|four|eight|\d) GPUs|multiple GPUs", text) and \
            not re.search(r"(?i)corrupt|zeros?\b", text):
        return _make("platform-bios", "the GPUs fail only together: their direct transfers are blocked",
                     "a CUDA error that appears only when several GPUs work together (DataParallel copies the model "
                     "and the batches directly between them) and not on one GPU: the peer-to-peer DMA between the "
                     "GPUs is broken by the platform, most often the IOMMU (AMD-Vi / VT-d) in translation mode, or "
                     "PCIe ACS",
                     "confirm on one GPU (CUDA_VISIBLE_DEVICES=0) and with NCCL_P2P_DISABLE=1; then disable the "
                     "IOMMU in the BIOS (AMD: AMD CBS > NBIO > IOMMU; Intel: VT-d) or set iommu=pt on the kernel "
                     "command line, and turn PCIe ACS off", [ctx.line_fact(errors[0])], errors)
    if re.search(r"(?i)corrupt|zeros?\b|wrong values", text):
        return _make("platform-bios", "copies between the GPUs arrive wrong: the IOMMU is in their way",
                     "a tensor copied from one GPU to another arrives as zeros or other values with no error, while "
                     "the same copy through the CPU is right: the direct (peer-to-peer) DMA between the GPUs goes "
                     "through the IOMMU in translation mode (or PCIe ACS), which drops or misroutes it",
                     "disable the IOMMU in the BIOS (AMD: Advanced > AMD CBS > NBIO Common Options > IOMMU; Intel: "
                     "VT-d) or put it in pass-through: iommu=pt (amd_iommu=on iommu=pt on AMD CPUs) on the kernel "
                     "command line, update-grub, reboot; check PCIe ACS is off (lspci -vvv | grep -i acsctl); until "
                     "then NCCL_P2P_DISABLE=1 avoids the direct copies", [ctx.line_fact(errors[0])], errors)
    hit = _catalogue(errors)
    if hit is not None:
        return _restate("platform-bios", hit, errors)
    if re.search(r"(?i)BAR|address space|4G", text):
        cause, fix = ("the BIOS does not map the card's memory (no Above 4G Decoding / Resizable BAR)",
                      "enable Above 4G Decoding and Resizable BAR in the BIOS (CSM off)")
    elif re.search(r"(?i)AMD-Vi|IO_PAGE_FAULT|iommu|unable to handle page fault", text):
        cause, fix = ("the IOMMU blocks the GPU's DMA", "add iommu=pt to the kernel command line "
                      "(GRUB_CMDLINE_LINUX), update-grub, reboot")
    else:
        cause, fix = ("the GPU does not come back from power saving", "add amdgpu.runpm=0 to the kernel command line")
    return _make("platform-bios", "the platform keeps the GPU from working", cause, fix, [ctx.line_fact(errors[0])],
                 errors)
