"""The distribution's own (inbox) GPU driver still loaded where another was meant (driver): a Kubernetes GPU operator
that installs its own driver on the node, or a blacklist written in /etc/modprobe.d that never reached the initramfs.

The kernel loads a GPU module from the initramfs early in boot, before the root file system's /etc/modprobe.d is read,
so a blacklist takes effect only once the initramfs is rebuilt (update-initramfs -u on Debian / Ubuntu, dracut -f on
RHEL / Fedora / SUSE) and the machine rebooted; NVIDIA's install guide says it of nouveau, AMD's GPU Operator docs of
the inbox amdgpu (its DeviceConfig's driver.blacklist writes the file, the initramfs and the reboot stay the
administrator's; root-caused by AMD on ROCm/gpu-operator#330, where the inbox amdgpu beneath the operator's user space
failed hipMemGetInfo with "invalid argument").
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text, _vendor

# a GPU operator on the cluster: AMD's (ROCm/gpu-operator, amd-gpu-operator) or NVIDIA's
_OPERATOR = re.compile(r"(?i)\bgpu[- ]operator\b|\bamd-gpu-operator\b|\bDeviceConfig\b")
# the GPU runtime failing in the pod: HIP's or CUDA's errors, no GPU found
_RUNTIME_FAILS = re.compile(r"(?i)\bHIP error\b|\bhipError\w+|No HIP GPUs are available|hipErrorNoDevice|"
                            r"\bCUDA error\b|No CUDA GPUs are available|CUDA driver version is insufficient|"
                            r"no ROCm-capable device|HSA_STATUS_ERROR\w*")
# a blacklist the user wrote, and the module still there after it
_BLACKLISTED = re.compile(r"(?i)\bblacklist(?:ed|ing)?\b\W{0,3}(?:the )?(nouveau|amdgpu|radeon|nvidia)\b|"
                          r"\b(nouveau|amdgpu|radeon)\b.{0,30}\bblacklist(?:ed)?\b|modprobe\.blacklist=(nouveau|amdgpu)")
_STILL_LOADED = re.compile(r"(?i)\bstill (?:loaded|loads|load|in use|there|active|running|bound)\b|"
                           r"currently in use by your system|\bis in use\b|Kernel driver in use:\s*(?:nouveau|amdgpu)|"
                           r"^\s*(?:nouveau|amdgpu)\s+\d{4,}\s+\d+")
# nouveau said, and not said to be gone ("nouveau is not loaded", "nouveau disabled")
_NOUVEAU_THERE = re.compile(r"(?i)\bnouveau\b(?!\W{0,20}(?:is |was )?(?:not\b|disabled|absent|gone|unloaded))")
# each distribution family's way to rebuild the initramfs
_REBUILD = ("sudo update-initramfs -u (Fedora / RHEL / SUSE: sudo dracut -f; Arch: sudo mkinitcpio -P), then reboot")


def _operator_over_inbox(ctx: Context, text: str) -> Optional[Diagnosis]:
    failing = _lines_matching(ctx, _RUNTIME_FAILS)
    if not (_OPERATOR.search(text) and failing):
        return None
    if any(e.family not in (None, "driver", "device-access", "visibility") for e in ctx.errors):
        return None
    amd = _vendor(ctx) == "amd" or re.search(r"(?i)\bHIP\b|\bROCm\b|amd-gpu-operator|amdgpu", text)
    if amd:
        return _make("driver", "the node still runs the inbox amdgpu under the GPU operator",
                     "the AMD GPU operator installs its own amdgpu (the ROCm driver) on the node, but the kernel's "
                     "inbox amdgpu was loaded first from the initramfs; the operator's ROCm user space in the pod then "
                     "runs on a driver it was not made for, and HIP calls fail",
                     "blacklist the inbox driver on every GPU node: echo 'blacklist amdgpu' | sudo tee "
                     "/etc/modprobe.d/blacklist-amdgpu.conf (or the DeviceConfig's spec.driver.blacklist: true), then "
                     + _REBUILD + ", so the operator's driver loads; check with cat /sys/module/amdgpu/version (the "
                     "ROCm driver's version; the inbox module has none)", [], failing, confirmed=False)
    if not _NOUVEAU_THERE.search(text):
        return None   # NVIDIA's operator fails for many reasons: only nouveau said points at the inbox driver
    # nouveau said to be there: the driver the operator brings cannot load, which comes before any pod's symptom
    return _first(_make("driver", "nouveau still holds the GPU under the GPU operator",
                 "the NVIDIA GPU operator's driver container cannot load the nvidia module while the inbox nouveau "
                 "holds the GPU, and nouveau comes from the initramfs before any blacklist in /etc/modprobe.d is read",
                 "on every GPU node: printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee "
                 "/etc/modprobe.d/blacklist-nouveau.conf, then " + _REBUILD + "; lsmod | grep nouveau must print "
                 "nothing before the driver pod starts", [], failing))


def _blacklist_not_in_initramfs(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _BLACKLISTED.search(text)
    still = _lines_matching(ctx, _STILL_LOADED)
    if not said or not still or re.search(r"(?i)update-initramfs|dracut|mkinitcpio", text):
        return None
    module = next(g for g in said.groups() if g)
    return _make("driver", f"the {module} blacklist is not in the initramfs",
                 f"{module} is loaded from the initramfs early in boot, before /etc/modprobe.d on the root file "
                 "system is read, so a blacklist written there has no effect until the initramfs is rebuilt",
                 f"keep the blacklist in /etc/modprobe.d (blacklist {module}"
                 + (", options nouveau modeset=0" if module == "nouveau" else "") + "), then " + _REBUILD
                 + f"; lsmod | grep {module} must then print nothing", [], still[:1], confirmed=False)


@rule("driver")
def inbox_driver_still_loaded(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a GPU operator on the cluster with the GPU runtime failing in its pods, or a blacklist the paste
    shows with the module still loaded; the vendor picks the module (amdgpu, nouveau)."""
    text = _text(ctx)
    return _operator_over_inbox(ctx, text) or _blacklist_not_in_initramfs(ctx, text)
