"""A tool's own check that the GPU driver is loaded, fooled by how the driver is installed: amdgpu built into the
kernel (CONFIG_DRM_AMDGPU=y) is not a module, so lsmod does not list it and /sys/module/amdgpu/initstate (which the
kernel creates for loadable modules only: Documentation/ABI/testing/sysfs-module) does not exist; amd-smi ("amdgpu not
found in modules") and rocminfo ("ROCk module is NOT loaded") read those and report a working driver as missing."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

# the driver said to be part of the kernel image, not a module (and not "not built for this kernel")
_BUILT_IN = re.compile(r"(?i)(?<!not )\b(?:built|compiled|baked)[- ]?in(?:to)? (?:my |the |our )?(?:own )?(?:custom )?"
                       r"kernel\b|\bCONFIG_DRM_AMDGPU\s*=\s*y\b|\bamdgpu\b.{0,40}\bbuilt[- ]in\b|\bbuilt[- ]in\b.{0,30}"
                       r"\bamdgpu\b|\bnot (?:built |compiled )?as a module\b")
# the tools' module checks failing
_MODULE_CHECK = re.compile(r"(?i)amdgpu not found in modules|ROCk module is NOT loaded|\bmodule status\b.{0,30}"
                           r"modprobe amdgpu|amdgpu (?:module )?(?:is )?not loaded")
_TOOLS = (("amd-smi", r"(?i)\bamd-?smi\b|\bAMDSMI\b"), ("rocminfo", r"(?i)\brocminfo\b|ROCk module"),
          ("rocm-smi", r"(?i)\brocm-smi\b"))


@rule("driver")
def built_in_amdgpu(ctx: Context) -> Optional[Diagnosis]:
    """A module check failing where the paste says amdgpu is built into the kernel: the driver is there, the tool's
    check is wrong; the fix is a release of the tool whose check also accepts a built-in driver."""
    text = _text(ctx)
    failing = _lines_matching(ctx, _MODULE_CHECK)
    if not failing or not _BUILT_IN.search(text):
        return None
    tools = [name for name, said in _TOOLS if re.search(said, text)] or ["the ROCm tool"]
    named = " and ".join(tools)
    return _first(_make(
        "driver", f"{named}'s driver check misses an amdgpu built into the kernel",
        "amdgpu is built into this kernel (CONFIG_DRM_AMDGPU=y), so it is no module: lsmod does not list it and "
        f"/sys/module/amdgpu/initstate (made for loadable modules only) does not exist; {named} looks for those and "
        "reports the working driver as not loaded",
        f"the driver itself works if ls /dev/kfd /dev/dri/renderD* and cat /sys/class/drm/card*/device/vendor (0x1002) "
        f"show the GPU; update {named} to a release whose check also accepts a built-in amdgpu (one that looks at "
        "/sys/module/amdgpu or /sys/class/drm instead of initstate), or build the kernel with amdgpu as a module "
        "(CONFIG_DRM_AMDGPU=m); modprobe and installing amdgpu-dkms are not the fix", [], failing))


# the amdgpu module said not to be loaded, by the tool or in the user's words ("fails if the `amdgpu` kernel module is
# not loaded", "amdgpu not found in modules")
# (amd-smi's own lines too: "Unable to detect any GPU devices, check amdgpu version and module status", and the
# library's AMDSMI_STATUS_DRIVER_NOT_LOADED / AMDSMI_STATUS_NOT_INIT from a script)
_NOT_LOADED_SAID = re.compile(r"(?i)amdgpu not found in modules|ROCk module is NOT loaded|\bamdgpu\W{0,2}\s*(?:kernel )?"
                              r"(?:module|driver)?\s*(?:is |was )?(?:not|isn't|wasn't) (?:yet )?loaded|"
                              r"Unable to detect any GPU devices, check amdgpu version and module status|"
                              r"AMDSMI_STATUS_(?:DRIVER_NOT_LOADED|NOT_INIT)\b")
_WSL = re.compile(r"(?i)\bwsl|microsoft-standard|/dev/dxg")


@rule("driver")
def amdgpu_module_not_loaded(ctx: Context) -> Optional[Diagnosis]:
    """amd-smi (or rocminfo) failing with the amdgpu module not loaded, where nothing says it is built in or under
    WSL: amd-smi's initialisation needs the amdgpu kernel module (and amd_hsmp for CPU metrics) loaded, even for
    its help (ROCm/amdsmi#45, where the maintainers made the message say so); the fix is loading the driver."""
    failing = _lines_matching(ctx, _NOT_LOADED_SAID)
    text = _text(ctx)
    if not failing or _BUILT_IN.search(text) or _WSL.search(text):
        return None
    # (rocminfo's own "ROCk module is NOT loaded" is device_files.py's reading, which weighs /dev/kfd beside it)
    if not re.search(_TOOLS[0][1], text):
        return None
    named = "amd-smi"
    return _first(_make(
        "driver", "the amdgpu kernel module is not loaded",
        f"{named} talks to the GPU through the amdgpu kernel driver and stops at its start when the module is not "
        "loaded (amd-smi needs it even to print its help in the releases that check it first)",
        "load the driver: sudo modprobe amdgpu, then check lsmod | grep amdgpu and sudo dmesg | grep -i amdgpu (a "
        "missing module for this kernel: install amdgpu-dkms or the distribution's linux-modules-extra for the "
        "running kernel; 'nomodeset' on the kernel command line keeps it from binding)", [], failing[:1]))
