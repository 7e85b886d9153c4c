"""GPUs joined by an Infinity Fabric (XGMI) bridge that fail their own start-up: a faulty bridge."""

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
