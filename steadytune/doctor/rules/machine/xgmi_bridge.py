"""GPUs joined by an Infinity Fabric (XGMI) bridge: a faulty bridge that fails their own start-up, and RCCL's
peer-to-peer transport failing over the bridge's XGMI path (the amdgpu switch that sends P2P over PCIe instead)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text


# GPUs joined by an Infinity Fabric (XGMI) bridge that fail their own start-up: the hive is set up while the driver
# starts each GPU (PSP brings up the links), so a faulty bridge fails every GPU's init
_BRIDGE = re.compile(r"(?i)\b(?:Infinity Fabric|XGMI|xGMI)\b.{0,20}\b(?:bridges?|links?|cards?)\b|\bbridge (?:card|board)\b")
_XGMI_INIT_FAILS = re.compile(r"(?i)Fatal error during GPU init|PSP (?:create ring|load|start)\w* failed|psp_hw_start|"
                              r"amdgpu_device_ip_init failed|xgmi.{0,40}(?:fail|error)|hive.{0,30}(?:fail|error)")


@rule("multi-gpu-transport")
def xgmi_bridge(ctx: Context) -> Optional[Diagnosis]:
    """Several Instinct GPUs linked by an Infinity Fabric bridge, each failing in the driver's start-up (the PSP that
    also trains the XGMI links): the bridge is the part to test first, by booting without it."""
    text = _text(ctx)
    bridge = _BRIDGE.search(text)
    failed = _lines_matching(ctx, _XGMI_INIT_FAILS.pattern)
    several = re.search(r"(?i)\b(?:[2-8] ?x ?|[2-8] )(?:AMD )?(?:Instinct )?MI\d{3}\w*|\b(?:[2-8]|four|eight|two) GPUs\b", text)
    if not (bridge and failed and several):
        return None
    return _first(_make("multi-gpu-transport", "the GPUs linked by an Infinity Fabric bridge fail to start",
                        "every GPU of the XGMI hive fails in the driver's start-up (the PSP firmware that also brings "
                        "up the Infinity Fabric links), and the GPUs share one part: the bridge; a faulty bridge or "
                        "connector fails all of them, where a firmware problem would not depend on it",
                        "power off, remove the Infinity Fabric bridge and boot: if every GPU then initialises "
                        "(rocm-smi lists them all), the bridge or a connector is faulty: reseat it, then replace "
                        "the bridge; if they still fail without it, update linux-firmware and amdgpu-dkms",
                        [ctx.line_fact(failed[0])], failed))


# the bridge said in a user's words ("AMD GPU Bridge", "with the bridge installed") beside Instinct cards
_BRIDGE_SAID = re.compile(r"(?i)\b(?:GPU|AMD|Instinct|MI\d{2,3}\w*|XGMI|Infinity Fabric) bridges?\b|\bwith (?:the |a |an )?"
                          r"(?:\w+ )?bridges? (?:installed|attached|connected|on)\b|\bXGMI\b")
_INSTINCT = re.compile(r"(?i)\bMI(?:50|60|100|210|250X?|300[AX]?|325X|355X)\b|\bgfx9(?:06|08|0a|42|50)\b")
# RCCL's P2P transport failing (its hipified source path, its peer-access or IPC calls)
_RCCL_P2P_FAILS = re.compile(r"(?i)transport/p2p\.cc\S*\s.{0,40}(?:WARN|fail)|hipIpc\w+.{0,40}(?:fail|error)|"
                             r"hipDeviceEnablePeerAccess.{0,40}(?:fail|error)|p2p\.cc:\d+ NCCL WARN")


@rule("multi-gpu-transport")
def xgmi_peer_to_peer(ctx: Context) -> Optional[Diagnosis]:
    """Instinct GPUs joined by an XGMI bridge, RCCL failing in its P2P transport: with the bridge, amdgpu maps peer
    memory over XGMI; where that path fails, the driver's module parameter use_xgmi_p2p=0 (amdgpu's parameter list:
    "Enable XGMI P2P interface (0 = disable; 1 = enable (default))") makes peer-to-peer go over PCIe instead."""
    text = _text(ctx)
    failed = _lines_matching(ctx, _RCCL_P2P_FAILS)
    if not (failed and _BRIDGE_SAID.search(text) and _INSTINCT.search(text)):
        return None
    return _first(_make("multi-gpu-transport", "RCCL's peer-to-peer over the XGMI bridge fails",
                        "these Instinct GPUs are joined by an Infinity Fabric (XGMI) bridge, so amdgpu maps the "
                        "GPUs' memory to each other over XGMI; RCCL's P2P transport fails setting up that mapping",
                        "boot with amdgpu.use_xgmi_p2p=0 (add it to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, "
                        "sudo update-grub, reboot; cat /sys/module/amdgpu/parameters/use_xgmi_p2p shows 0): peer-to-"
                        "peer then goes over PCIe; confirm first with NCCL_P2P_DISABLE=1 (through host memory), and "
                        "keep iommu=pt on the command line as RCCL's docs ask",
                        [ctx.line_fact(failed[0])], failed))
