"""AMD's multi-arch torch wheels with their device package installed and still no loadable kernel image
(hipErrorInvalidImage) on an xnack-capable Instinct target. The device wheel (amd-torch-device-<gfx>) carries the
arch's kernels in kernel-pack archives (.kpack); besides torch_<gfx>.kpack a release shipped near-empty
xnack-specific archives (xnack+ / xnack- variants) that the loader tried first, found no kernels in and did not fall
through from. The device package is there, so "install the device package" is no answer: the archives are.

Source: ROCm/TheRock#7081 (torch 2.12 from https://repo.amd.com/rocm/whl-multi-arch/ with amd-torch-device-gfx90a on
ROCm 7.14: hipErrorInvalidImage on any kernel, torch 2.11 fine; deleting the two empty xnack .kpack files worked
around it; the loader's fall-through fix is rocm-systems PR 9874, backported to ROCm/pytorch). The xnack targets are
LLVM's (AMDGPUUsage: gfx90a and gfx942 take the xnack feature; checked round 19 against llvm/llvm-project
llvm/docs/AMDGPUUsage.rst, the processor table, whose target-feature column lists xnack for both)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_XNACK_ARCHS = ("gfx90a", "gfx942")
_INVALID_IMAGE = re.compile(r"(?i)hipErrorInvalidImage|invalid (?:kernel|device) image|no kernel image is available")
_DEVICE_PACKAGE = re.compile(r"(?i)\bamd-torch-device-(gfx\w+)|torch\[device-(gfx\w+)\]")


@rule("torch-build")
def empty_xnack_kernel_packs(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: hipErrorInvalidImage, the device package of an xnack-capable arch named in the paste (so it is
    installed), and that arch the machine's."""
    text = _text(ctx)
    said = _lines_matching(ctx, _INVALID_IMAGE)
    packages = [m.group(1) or m.group(2) for m in _DEVICE_PACKAGE.finditer(text)]
    if not said or not packages:
        return None
    arch, fact = ctx.arch()
    arch = arch if arch in packages else packages[0]
    if arch not in _XNACK_ARCHS:
        return None
    return _first(_make(
        "torch-build", f"the {arch} device wheel's kernel packs: empty xnack archives are read first",
        f"amd-torch-device-{arch} is installed, yet no kernel image loads: its kernels sit in .kpack archives, and "
        f"beside torch_{arch}.kpack this release carries near-empty xnack-specific ones ({arch}:xnack+ / xnack-) "
        "that the loader picks first and does not fall through from",
        f"list the archives: pip show -f amd-torch-device-{arch} | grep kpack; delete the near-empty xnack ones "
        f"(xnack in the name, next to nothing in them) and keep torch_{arch}.kpack; or stay on the previous torch release (its "
        f"device wheel) until one with the kpack loader's fall-through fix (rocm-systems PR 9874)",
        [f for f in (fact,) if f], said[:1]))
