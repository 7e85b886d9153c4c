"""An RDNA 3.5 APU (gfx1150 Strix Point, gfx1151 Strix Halo, gfx1152 Krackan) whose every host-to-device copy faults
under a 6.17 kernel: hipMalloc works, the first hipMemcpy (torch's .to("cuda"), a HIP sample's copy) dies with
"Memory access fault ... Page not present" (amdgpu: WALKER_ERROR / MAPPING_ERROR). It is the kernel driver, not ROCm
or the program: the same user space runs under the 6.14 OEM kernel, or with AMD's own amdgpu-dkms driver built for the
kernel in place of the kernel's inbox amdgpu.

Sources: ROCm/amdgpu#213 (gfx1150, Ubuntu 24.04: faults on 6.17.0-1017-oem and 6.17.0-20-generic, not on
6.14.0-1018-oem); ROCm/legacy-rocm-build#6146 (gfx1151, ROCm 7.2.1 on 6.17.0-20-generic, even HIP's samples: AMD named
the known kernel-driver issue, the 6.14 1018-oem kernel or amdgpu-dkms); amdgpu-install's dkms use case (AMD's Linux
install docs: sudo amdgpu-install --usecase=dkms). Checked round 19: ROCm/amdgpu#213's report (every
hipMemcpy(HostToDevice) faults on 6.17.0-1017-oem and 6.17.0-20-generic, "does not occur on kernel 6.14.0-1018-oem");
ROCm/legacy-rocm-build#6146 (harkgill-amd: "swap onto the 6.14-1018 OEM kernel", remove amdgpu-dkms; the reporter:
resolved on 6.14.0-1018-oem); AMD's Ryzen APU install guide (Ubuntu 24.04: sudo apt install
linux-image-6.14.0-1018-oem)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_APUS = ("gfx1150", "gfx1151", "gfx1152")
_APU_NAMES = re.compile(r"(?i)Radeon 80[4-6]0S|Radeon 8[4-9]0M|Strix (?:Halo|Point)|Ryzen AI (?:MAX|9|7|5)")
_FAULT = re.compile(r"(?i)Memory access fault by GPU|\[gfxhub\] page fault|\bpage fault\b|WALKER_ERROR: 0x1|"
                    r"Page not present")
# the fault on a copy: HIP's memcpy, torch moving a tensor, a sample that only copies
_ON_COPY = re.compile(r"(?i)\bhipMemcpy\w*|\bmemcpy\b|\bcopy(?:ing)? (?:to|from) (?:the )?(?:device|GPU|host)|"
                      r"\bhost[- ]to[- ]device\b|\bH2D\b|\.to\(['\"]?(?:cuda|hip)|\.cuda\(\)")
_KERNEL = re.compile(r"\b6\.17\.\d+(?:-\d+)?(?:-(?:generic|oem|\w+))?")


@rule("driver")
def apu_copies_fault_on_kernel_6_17(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an RDNA 3.5 APU, a GPU memory fault, the fault on a copy (hipMemcpy, a tensor moved to the GPU),
    and a 6.17 kernel (the kernel fact or the release said)."""
    text = _text(ctx)
    arch, fact = ctx.arch()
    if not (arch in _APUS or (arch is None and _APU_NAMES.search(text))):
        return None
    if ctx.override() is not None or re.search(r"HSA_OVERRIDE_GFX_VERSION=\d", text):
        return None   # the APU spoofed as another chip faults on that chip's code: the override readings'
    faults = _lines_matching(ctx, _FAULT)
    if not faults or not _ON_COPY.search(text):
        return None
    kernels = [f.value for f in ctx.sheet.of("kernel")] or [m.group(0) for m in _KERNEL.finditer(text)]
    on_617 = [k for k in kernels if re.match(r"6\.17\b", k)]
    if not on_617:
        return None
    return _first(_make(
        "driver", f"the {on_617[0]} kernel's amdgpu faults every copy to the {arch or 'APU'}",
        f"on an RDNA 3.5 APU ({arch or 'Strix'}) the 6.17 kernels' amdgpu driver maps host memory for the GPU wrongly: "
        "allocations work, but the first host-to-device copy faults (\"Page not present\"), even in HIP's own samples; "
        "ROCm and the program are not the cause",
        "boot the 6.14 OEM kernel, on which the copy works (6.14.0-1018-oem on Ubuntu 24.04: install it, pick it in "
        "GRUB's Advanced options, check with uname -r), or keep this kernel and install AMD's own kernel driver "
        "built for it: sudo amdgpu-install --usecase=dkms (the amdgpu-dkms package from repo.radeon.com's amdgpu "
        "repository), reboot, check with dkms status; then run the copy again",
        [f for f in (fact,) if f], faults[:1]))
