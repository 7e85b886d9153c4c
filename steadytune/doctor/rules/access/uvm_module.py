"""CUDA error 999 (CUDA_ERROR_UNKNOWN) told in a user's own words, on a Linux machine where the GPU works otherwise
(round 18, r18b). access/driver.py reads the error when the paste quotes it as an error line; a report that only
says "error 999 was in my logs" (a service that stopped using the GPU) carries no such line. The usual cause on Linux
is NVIDIA's unified-memory module, nvidia_uvm: not loaded at all (a service started before anything loaded it, a
system whose configuration does not load it) or left broken by a suspend / resume. NixOS/nixpkgs#333123: ollama's
service gave error 999 until `sudo modprobe nvidia_uvm`, then `systemctl daemon-reload` and a restart of the service.
NixOS loads extra modules at boot with boot.kernelModules (NixOS options: boot.kernelModules, "The set of kernel
modules to be loaded in the second stage of the boot process")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule

_SAID_999 = re.compile(r"(?i)\berror (?:code )?999\b|\b999 error\b|CUDA_ERROR_UNKNOWN")
_NVIDIA = re.compile(r"(?i)\bcuda\b|\bnvidia\b|\bRTX ?\d{4}|\bGTX ?\d{3,4}")
_SERVICE = re.compile(r"(?i)\bservices?\.\w+|\bsystemctl\b|\bsystemd\b|\bservice\b")


@rule("driver")
def cuda_999_said(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    said = _lines_matching(ctx, _SAID_999)
    if not said or not _NVIDIA.search(text) or on_windows(ctx, text) or any(e.family for e in ctx.errors
                                                                            if e.family == "driver"):
        return None
    nixos = re.search(r"(?i)\bnixos\b|services\.\w+\s*=\s*\{|\bnixpkgs\b", text)
    boot = ('to load it at every boot on NixOS: boot.kernelModules = [ "nvidia_uvm" ]; (then nixos-rebuild switch)'
            if nixos else "to load it at every boot: echo nvidia_uvm | sudo tee /etc/modules-load.d/nvidia-uvm.conf")
    service = ("; then sudo systemctl daemon-reload and restart the service (sudo systemctl restart <service>)"
               if _SERVICE.search(text) else "; then rerun the program")
    return _make("driver", "CUDA error 999: NVIDIA's unified-memory module is not usable",
                 "CUDA_ERROR_UNKNOWN (999) at start-up on Linux while the GPU works for other programs: the NVIDIA "
                 "unified-memory kernel module (nvidia_uvm) is not loaded, or a suspend / resume left it broken",
                 "load it: sudo modprobe nvidia_uvm (lsmod | grep nvidia_uvm must list it; if it was loaded and broken "
                 f"by a suspend: sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm){service}; {boot}; a driver "
                 "installed or updated since the last boot needs a reboot instead", [], said, confirmed=False)
