"""SELinux keeping a container from the GPU device nodes (Fedora, RHEL and their kin): /dev/kfd or
/dev/nvidia* is refused even when --device passes it in. Ollama's GPU page: setsebool container_use_devices. An audit
denial or the NVIDIA hook's own refusal in the paste is left to the rules and entries that read those lines.
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (Context, Diagnosis, _CONTAINED, _first, _lines_matching, _make, _text,
                                          _vendor, rule)


_SELINUX = re.compile(r"(?i)\bselinux\b|\bsetenforce\b")
_SELINUX_OFF = re.compile(r"(?i)selinux[^\n]{0,30}\b(?:disabled|permissive|is off|turned off)\b|setenforce 0[^\n]{0,40}"
                          r"\b(?:still|same|doesn't|does not|didn't|no)\b|container_use_devices")
_DENIED = re.compile(r"(?i)permission denied|operation not permitted|avc:\s+denied|no (?:compatible )?GPUs?\b|"
                     r"No HIP GPUs|No CUDA GPUs|no GPU|not (?:detect|find|see)\w*\b[^\n]{0,20}GPU|"
                     r"Failed to initialize NVML|Unable to open /dev/kfd")


@rule("device-access")
def selinux_blocks_container_devices(ctx: Context) -> Optional[Diagnosis]:
    """On Fedora, RHEL and their kin SELinux labels the GPU device nodes so that a container may not open them, even
    when --device passes them in: /dev/kfd or /dev/nvidia* is refused with permission denied. Ollama's GPU page:
    allow containers to use devices."""
    text = _text(ctx)
    said = _lines_matching(ctx, _SELINUX)
    if not said or _SELINUX_OFF.search(text) or not _CONTAINED.search(text) or not _DENIED.search(text):
        return None
    if re.search(r"(?i)\bavc:\s+denied\b", text):
        return None   # the audit log's own denial names the permission and the policy: the access rules read it
    if re.search(r"nvidia-container-cli: (?:initialization|mount) error:", text):
        return None   # the NVIDIA hook's own refusal: its catalogue entry gives the toolkit's relabel / label=disable fix
    amd = _vendor(ctx) == "amd"
    devices = ("--device /dev/kfd --device /dev/dri --group-add video --group-add render" if amd else
               "--gpus all (podman: --device nvidia.com/gpu=all through CDI)")
    return _first(_make(
        "device-access", "SELinux keeps the container from the GPU devices",
        "SELinux is enforcing on the host and its policy denies containers the GPU device nodes (/dev/kfd and "
        "/dev/dri on AMD, /dev/nvidia* on NVIDIA), so the program inside finds no GPU or gets permission denied even "
        "though the devices are passed in",
        "on the host allow containers to use devices: sudo setsebool -P container_use_devices=1 (or start this one "
        f"container with --security-opt label=disable), and keep {devices}; sudo ausearch -m avc -ts recent shows "
        "the denials", said[:1], said[:1]))
