"""podman 5.5 no longer resolving the NVIDIA CDI spec that worked under 5.4 (round 18, r18b). On NixOS the NVIDIA
Container Toolkit module writes its spec under /run/cdi; after nixpkgs moved podman from 5.4.1 to 5.5.1, `--device
nvidia.com/gpu=all` failed with "unresolvable CDI devices" although the spec was unchanged. The reporter of
NixOS/nixpkgs#417312 got the GPU back by pinning podman to 5.4.1 with an overlay; a reporter of the related
NixOS/nixpkgs#420638 by pointing podman at the spec directory (`podman --cdi-spec-dir=/run/cdi run ...`). A podman
update named as what broke it, not a changed device, separates this from the stale-spec reading (access/cdi_specs)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_UNRESOLVABLE = re.compile(r"(?i)unresolvable CDI devices?")
# "with the update to 5.5.1", "since podman 5.5", "after upgrading podman to 5.5.0"
_PODMAN_55 = re.compile(r"(?i)(?:podman\W{0,3}(?:to |version )?v?|(?:update|upgrade|upgrading|updating) (?:of podman )?"
                        r"to v?)(5)\.(5|[6-9])(?:\.\d+)?\b")


@rule("device-access")
def podman_55_cdi(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _UNRESOLVABLE)
    text = _text(ctx)
    release = _PODMAN_55.search(text)
    if not said or not release or not re.search(r"(?i)\bpodman\b", text) or \
            not re.search(r"(?i)\bnvidia\.com/gpu\b|\bnvidia\b", text):
        return None
    version = release.group(0).split()[-1].lstrip("v")
    nixos = bool(re.search(r"(?i)\bnixos\b|\bnixpkgs\b|\boverlays?\b", text))
    pin = ("pin podman to 5.4.1 with an overlay (podman = prev.podman.overrideAttrs, version 5.4.1 and its source), as "
           "NixOS users did" if nixos else "go back to the podman 5.4 release you had (5.4.1 restored it for NixOS "
           "users) with your package manager, and hold it there")
    return _first(_make("device-access", f"podman {version} does not resolve the NVIDIA CDI spec",
                        f"after the update to podman {version} the nvidia.com/gpu devices are unresolvable although the "
                        "spec did not change: this podman does not find the spec where the NVIDIA Container Toolkit "
                        "put it (under /run/cdi on NixOS), which podman 5.4 did",
                        f"point podman at the spec's directory: podman --cdi-spec-dir=/run/cdi run --device "
                        f"nvidia.com/gpu=all ... (ls /run/cdi /var/run/cdi /etc/cdi shows where it is); or {pin}; "
                        "nvidia-ctk cdi list must list nvidia.com/gpu=all", [], said))
