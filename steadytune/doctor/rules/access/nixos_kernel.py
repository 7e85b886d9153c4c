"""HIP / ROCm finding no GPU on NixOS, where the amdgpu driver (and its KFD, which ROCm's runtime talks to) is the
running kernel's own: there is no amdgpu-dkms to install, so a ROCm runtime newer than what an older LTS kernel's KFD
offers is fixed by a newer kernel (round 18, r18b). NixOS/nixpkgs#303586: blender-hip's "hipInit: Invalid device" on
the 6.1 LTS kernel, fixed with boot.kernelPackages = pkgs.linuxPackages_latest (the NixOS wiki's Linux kernel page
names that option and package set)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import NOT_DETECTED, Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.nixos_channels import nixos_release

_NIXOS = re.compile(r"(?i)\bnixos\b|\bnix (?:shell|run|develop)\b|\bnixpkgs#")
_HIP_NO_GPU = re.compile(r"(?i)hipInit\W{0,3}(?:\w+\W{0,3})?(?:Invalid device|no ROCm-capable device|"
                         r"hipErrorNoDevice|hipErrorInvalidDevice)|\bHIP\b.{0,40}\b(?:no (?:compatible )?GPUs? "
                         r"(?:found|detected)|Invalid device)|hipErrorNoDevice|no ROCm-capable device|"
                         r"No (?:compatible|HIP) GPUs? (?:were )?(?:found|available)")
_KERNEL = re.compile(r"(?i)\bLinux (\d+)\.(\d+)(?:\.\d+)?|\bkernel (?:version )?(\d+)\.(\d+)")


@rule("driver")
def nixos_kernel_too_old_for_rocm(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    if not _NIXOS.search(text) or re.search(r"(?i)\bnvidia\b|\bcuda\b", text):
        return None
    # the release channel the paste names (NixOS 24.05, 23.11 (Tapir)): nixpkgs moved its ROCm to 6.x in 24.05 (the
    # 24.05-beta tree has pkgs/development/rocm-modules/6, 23.11-beta rocm-modules/5 at 5.7.1); the
    # channels before carry ROCm 5.x, which the 6.1 LTS kernel's KFD serves, so there the break is the channel's own
    # package (install/nixos_channels.py reads it: nixpkgs#265371, 23.11 on 6.1.60, fixed by the 23.05 package)
    release = nixos_release(text)
    if release and (release[0], int(release[1])) < (24, 5):
        return None
    failed = _lines_matching(ctx, _HIP_NO_GPU) or (_lines_matching(ctx, NOT_DETECTED)
                                                   if re.search(r"(?i)\bHIP\b|\bROCm\b", text) else [])
    if not failed:
        return None
    # the reading needs the kernel in the paste, and an older one: below 6.8 (a line drawn here, not a documented
    # limit: nixpkgs#303586 ran 6.1.78); with no kernel named, a break on one channel is the channel's package
    # (nixos_channels)
    kernel = _KERNEL.search(text)
    if kernel is None:
        return None
    major, minor = (int(g) for g in [g for g in kernel.groups() if g][:2])
    if (major, minor) >= (6, 8):
        return None
    said = f" ({major}.{minor})"
    return _make("driver", f"the NixOS kernel{said} is older than the ROCm runtime needs",
                 f"on NixOS the amdgpu driver and its KFD, which ROCm's runtime talks to, come with the running "
                 f"kernel{said}; an older LTS kernel's KFD does not serve the ROCm release the package is built with, "
                 "so HIP finds no usable device",
                 "boot a newer kernel: boot.kernelPackages = pkgs.linuxPackages_latest; in configuration.nix, then "
                 "sudo nixos-rebuild switch and reboot (uname -r must show it); keep the user in the video and render "
                 "groups (users.users.<name>.extraGroups)", [], failed, confirmed=False)
