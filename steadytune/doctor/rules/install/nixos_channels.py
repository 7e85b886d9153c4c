"""A nixpkgs GPU package (blender-hip, a ROCm or HIP build) that fails to initialise HIP on a NixOS release channel
whose ROCm stack it was built with: every package of a channel is built against that channel's ROCm, so a break in it
(HIP's hipInit refusing the device, "Invalid device") comes with the channel, and the same package from the previous
release channel - built against the ROCm that worked - runs beside the rest of the system (nix-shell / nix run with
that channel's nixpkgs). NixOS releases twice a year, YY.05 and YY.11, so the previous channel follows from the one
the paste names. Likely, not settled: the paste shows the failure, not which ROCm package broke. Source:
NixOS/nixpkgs#265371 (blender-hip on 23.11 failing hipInit; the 23.05 package rendered with HIP)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_HIP_INIT = re.compile(r"(?i)\bhipInit\b\W{0,3}(?:failed\W{0,3})?(?:Invalid device|hipErrorInvalidDevice|hipErrorNoDevice|"
                       r"no ROCm-capable device)|\bhipErrorInvalidDevice\b")
_NIXOS_RELEASE = re.compile(r"(?i)\bNixOS\W{1,4}(\d{2})\.(05|11)\b|\b(\d{2})\.(05|11) \((?:[A-Z][a-z]+)\)")
_NIX_PACKAGE = re.compile(r"(?i)\bnixpkgs\b|\bnix-(?:shell|env)\b|\bnix (?:run|shell|profile)\b|-hip\b|\brocmPackages\b")


def nixos_release(text: str) -> Optional[tuple[int, str]]:
    """The NixOS release channel a paste names ("NixOS 24.05", "23.11 (Tapir)") as (year, "05" or "11")."""
    found = _NIXOS_RELEASE.search(text)
    if found is None:
        return None
    return int(found.group(1) or found.group(3)), found.group(2) or found.group(4)


def _previous(year: int, month: str) -> str:
    return f"{year}.05" if month == "11" else f"{year - 1}.11"


@rule("abi-mismatch")
def nixpkgs_hip_package_on_its_channel(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: NixOS with its release named, a nixpkgs package, and HIP's init refusing the device."""
    if not ctx.sheet.has("os", "nixos"):
        return None
    text = _text(ctx)
    release = nixos_release(text)
    if release is None or not _NIX_PACKAGE.search(text):
        return None
    said = _lines_matching(ctx, _HIP_INIT)
    if not said:
        return None
    year, month = release
    this, before = f"{year}.{month}", _previous(year, month)
    # the package: a "-hip" build named, else what nix was asked for (nix-shell -p X, nix run nixpkgs#X)
    package = (re.search(r"(?i)\b([\w-]+-hip)\b", text) or
               re.search(r"(?i)\bnix-shell\b[^\n]*?\s-p\s+([\w.-]+)|\bnixpkgs#([\w.-]+)", text))
    name = next((g for g in package.groups() if g), "<the package>") if package else "<the package>"
    return _make("abi-mismatch", f"the nixpkgs {this} build of {name} fails to initialise HIP",
                 f"every package of the NixOS {this} channel is built against that channel's ROCm; hipInit refusing the "
                 "device while the GPU works elsewhere points at the channel's HIP runtime / ROCm build, not the card",
                 f"run {name} from the previous release channel, built against the ROCm that worked: nix-shell -I "
                 f"nixpkgs=channel:nixos-{before} -p {name} (or add nixos-{before} as a channel and install it from "
                 f"there), and report the break against the {this} ROCm packages",
                 [ctx.line_fact(said[0])], said[:1], confirmed=False)
