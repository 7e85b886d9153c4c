"""RCCL / DDP across several Radeon cards failing with "invalid device pointer" when the host's amdgpu kernel driver
is older than the ROCm user space (round 18, r18b). ROCm's peer-to-peer path between consumer cards needs the
kernel driver of the same ROCm release; updating ROCm inside a container (or only its packages) leaves the host's
amdgpu module as it was. ROCm/rccl#1055 (two 7900 XTX, ROCm 5.7 -> 6.0 in docker): AMD's answer was to install the
ROCm 6.0 kernel driver and firmware packages, amdgpu-dkms and amdgpu-dkms-firmware, on the bare-metal host, which
ended the invalid device pointer."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor, rule

_POINTER = re.compile(r"(?i)invalid device pointer|hipErrorInvalidDevicePointer")
_SEVERAL = re.compile(r"(?i)multi-?gpu|multigpu|\bDDP\b|DistributedDataParallel|\bRCCL\b|\bNCCL_\w+|torchrun|"
                      r"\bnccl\b|world_size|\b(?:two|2|four|4|several|multiple) (?:GPUs|cards)\b")
_RELEASE = re.compile(r"(?i)\bROCm(?: Version)?:?\s*(?:ROCm )?(\d+\.\d+)")


@rule("driver")
def rccl_needs_host_amdgpu(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    pointer = _lines_matching(ctx, _POINTER)
    if not pointer or not _SEVERAL.search(text) or _vendor(ctx) != "amd":
        return None
    release = _RELEASE.search(text)
    said = f"ROCm {release.group(1)}" if release else "the ROCm release in use"
    return _make("driver", "the host's amdgpu kernel driver is older than the ROCm in use",
                 f"peer-to-peer copies between the Radeon cards fail with invalid device pointer: RCCL and HIP of "
                 f"{said} need the amdgpu kernel driver of their release on the host, and updating ROCm inside a "
                 "container (or only its user-space packages) leaves the host's amdgpu module behind",
                 "install the kernel driver and firmware of the ROCm release on the bare-metal host (not in the "
                 "container): sudo apt install amdgpu-dkms amdgpu-dkms-firmware from that release's amdgpu repository "
                 "(or sudo amdgpu-install --usecase=dkms), reboot, then check with dkms status and sudo dmesg | grep "
                 "-i amdgpu; then rerun the multi-GPU job (a newer ROCm release, 6.0 or later for RDNA3 multi-GPU, "
                 "with its host driver, where the current one is older)", [], pointer, confirmed=False)
