"""A Vulkan program on a machine with an NVIDIA GPU that prints Mesa's own messages (visibility): "vulkan: No DRI3
support detected - required for presentation" (Mesa's X11 presentation code), lavapipe's "not a conformant vulkan
implementation", llvmpipe named as the device. Those come from a Mesa Vulkan driver, so the program took a Mesa device
(the software rasteriser, an integrated GPU) as its Vulkan device 0 instead of the NVIDIA GPU: its viewer cannot
present, renders return nothing, or it runs on the CPU. Mesa's device-select layer chooses the default device, and
the loader can be limited to NVIDIA's driver.

Sources: isaac-sim/IsaacGymEnvs#126 (the maintainer: make the NVIDIA GPU the Vulkan device, check with vulkaninfo /
vkcube; a user with the same error fixed it with MESA_VK_DEVICE_SELECT, the id found by MESA_VK_DEVICE_SELECT=list
vulkaninfo); Mesa's environment-variable docs (MESA_VK_DEVICE_SELECT: "list" prints the devices, vid:did makes that PCI
device the default); the Vulkan loader's docs (VK_ICD_FILENAMES, VK_DRIVER_FILES in
newer loaders, limit the drivers it loads to the manifests named)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_MESA_DEVICE = re.compile(r"(?i)No DRI3 support detected|lavapipe is not a conformant vulkan|\bllvmpipe\b|"
                          r"MESA-INTEL:|\bMesa\b.{0,40}\bVulkan\b.{0,40}\b(?:device|selected)")
_NVIDIA = re.compile(r"(?i)\bNVIDIA\b|\bRTX\s?\d{4}|\bGeForce\b|\bGTX\s?\d{3,4}|\bQuadro\b|\bTesla\b")


@rule("visibility")
def vulkan_took_a_mesa_device(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a Mesa Vulkan driver's message and an NVIDIA GPU on the machine."""
    said = _lines_matching(ctx, _MESA_DEVICE)
    text = _text(ctx)
    if not said or not (_NVIDIA.search(text) or any(a.startswith("sm_") for a in ctx.sheet.machine_archs)):
        return None
    if re.search(r"(?i)\bWSL\b|microsoft-standard", text):
        return None   # WSL 2 has no NVIDIA Vulkan driver at all: the wsl reading
    return _make(
        "visibility", "Vulkan uses a Mesa device instead of the NVIDIA GPU",
        "the message comes from a Mesa Vulkan driver (llvmpipe / lavapipe, or an integrated GPU), so the program took "
        "that device as its Vulkan device 0 rather than the NVIDIA GPU: the viewer cannot present and renders come "
        "back empty",
        "list the Vulkan devices: MESA_VK_DEVICE_SELECT=list vulkaninfo (vulkaninfo --summary shows the same; the "
        "NVIDIA GPU must be there - if it is missing, the NVIDIA driver's Vulkan ICD is: /usr/share/vulkan/icd.d/"
        "nvidia_icd.json), then make it the default: export MESA_VK_DEVICE_SELECT=10de:<its device id> (the "
        "vendor:device pair from that list), or load only NVIDIA's driver: export "
        "VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/nvidia_icd.json (VK_DRIVER_FILES in newer loaders); on a laptop, "
        "run the desktop on the NVIDIA GPU (prime-select nvidia) for the viewer; vkcube must then run",
        [], said[:1])
