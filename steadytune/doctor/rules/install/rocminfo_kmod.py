"""rocminfo's "ROCk module is NOT loaded, possibly no GPU devices" where the module is loaded: from ROCm 4.1, rocminfo
checked for the amdgpu (ROCk) module by running lsmod, a program of the kmod package. A container image (or a minimal
system) without kmod has no lsmod, so the check fails ("sh: 1: lsmod: not found") and rocminfo reports the module
missing although the host's driver is loaded and the GPU is usable. The fix is the package, not the driver.

Sources: ROCm/tensorflow-upstream PR 1364 (adds kmod to the ROCm Dockerfile: "The kmod package seems to be required in
order to successfully run rocminfo. This requirement started with rocm-4.1.0."), ROCm/ROCm-docker#50 ("sh: 1: lsmod:
not found" before the message, in a container), ROCm/rocminfo PR 43 / commit 94b4b3f0 (rocminfo later reads
/sys/module/amdgpu instead of running lsmod)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import (Context, Diagnosis, _CONTAINED, _first, _lines_matching, _make, _text,
                                          rule)


_NOT_LOADED = re.compile(r"(?i)ROCk module is NOT loaded")
# lsmod (or modinfo) itself missing, or the kmod package named
_NO_LSMOD = re.compile(r"(?i)\b(?:lsmod|modinfo|modprobe)\b:?\s*(?:command )?not found|\bkmod\b")
# the user says rocminfo needs something it lacks ("This requirement started with rocm-4.1.0", "a new dependency")
_REQUIREMENT = re.compile(r"(?i)\brequirement\b|\brequires? (?:a |the )?(?:package|dependency)|\bnew dependency\b|"
                          r"\bmissing (?:package|dependency)\b")


@rule("rocm-libs-missing")
def rocminfo_without_kmod(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: rocminfo's module check failing, with lsmod missing, kmod named, a container, or the paste calling
    it a requirement; a paste that shows the module absent on the host (dmesg, modprobe failing) is the driver's."""
    lines = _lines_matching(ctx, _NOT_LOADED)
    if not lines:
        return None
    text = _text(ctx)
    if re.search(r"(?i)modprobe: (?:FATAL|ERROR)|Module amdgpu not found|Key was rejected", text):
        return None   # the module really is not there: the driver reading
    # a container alone counts where its devices reached it (no /dev/kfd failure: that is the device reading's)
    contained = (_CONTAINED.search(text) or ctx.sheet.has("platform", "container")) and \
        not re.search(r"(?i)/dev/kfd|hsa api call failure", text)
    if not (_NO_LSMOD.search(text) or contained or _REQUIREMENT.search(text)):
        return None
    return _first(_make(
        "rocm-libs-missing", "rocminfo cannot check for the module: kmod (lsmod) is not installed",
        "since ROCm 4.1 rocminfo checks for the amdgpu (ROCk) module with lsmod, from the kmod package; where kmod is "
        "not installed (container images, minimal systems) the check fails and rocminfo reports the module NOT loaded "
        "even though the host's driver is loaded",
        "install kmod where rocminfo runs: apt-get install kmod (dnf install kmod; in a Dockerfile add kmod to the "
        "packages the image installs), then run rocminfo again; on the host, lsmod | grep amdgpu must list the module "
        "(a container shares the host's driver: it is loaded there, not in the image)",
        [], lines[:1] + _lines_matching(ctx, _NO_LSMOD)[:1]))
