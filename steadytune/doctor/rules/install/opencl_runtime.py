"""An OpenCL program (hashcat, a miner, Blender's old Cycles, darktable) on an AMD GPU under Linux finding no OpenCL
platform at all: clGetPlatformIDs returns CL_PLATFORM_NOT_FOUND_KHR because no vendor ICD is registered under
/etc/OpenCL/vendors. A ROCm install without its OpenCL use case (or the kernel driver alone) has HIP but no OpenCL
runtime. The fix is the OpenCL runtime itself: ROCm's (amdgpu-install's opencl use case), or, keeping the distribution's
in-box amdgpu kernel driver, only the OpenCL part of AMD's packaged driver in headless mode.

Sources: ROCm's amdgpu-install pages (use cases: "If --usecase option is not present, the default selection is
graphics,opencl,hip"); amdgpu-install's --no-dkms (installs without the DKMS kernel driver, as in
ROCm/legacy-rocm-build#1713's `amdgpu-install --usecase=rocm --no-dkms`); the amdgpu-install docs' table of the Pro installer
(`./amdgpu-pro-install -y --opencl=rocr,legacy`, with `--headless` for OpenCL without the Pro graphics; checked v18b:
gitlab.com/amdgpu/docs/amdgpu-install commit 25007ea8, a pastebin log of amdgpu-pro 21.20's
`./amdgpu-pro-install -y --opencl=rocr,legacy --headless`, and a gist's `--opencl=legacy,pal --headless --no-dkms`);
hashcat/hashcat#2972 (RX 6900 XT, ROCm installed, CL_PLATFORM_NOT_FOUND_KHR; the reporter kept the in-box amdgpu driver
and installed only amdgpu-pro's OpenCL in headless mode, and hashcat found the card)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule, _vendor


_NO_PLATFORM = re.compile(r"(?i)CL_PLATFORM_NOT_FOUND_KHR|No OpenCL[-, ]\s*(?:compatible|HIP|CUDA)[\w ,-]{0,60}platform "
                          r"(?:was )?found|(?m:\bNumber of platforms\s*:?\s+0\s*$)")


@rule("rocm-libs-missing")
def no_opencl_runtime_on_amd(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: OpenCL finding no platform at all, on Linux, with an AMD GPU (or ROCm) named."""
    lines = _lines_matching(ctx, _NO_PLATFORM)
    if not lines:
        return None
    text = _text(ctx)
    if on_windows(ctx, text) or _vendor(ctx) != "amd":
        return None
    # a GPU the kernel's compute driver skipped or the runtime cannot open has no platform whatever is installed:
    # another error line of the paste (kfd skipping the device, an hsa call failing) says why first
    if re.search(r"(?i)\bkfd\b.{0,40}skipped|hsa api call failure|rejects atomics", text) or \
            any(e.family and e.family != "rocm-libs-missing" for e in ctx.errors):
        return None
    return _make("rocm-libs-missing", "no OpenCL runtime is installed for the AMD GPU",
                 "OpenCL programs find GPUs through a vendor runtime registered in /etc/OpenCL/vendors; the ROCm or "
                 "driver install here has none (HIP and the kernel driver do not bring it), so no platform is found",
                 "install an OpenCL runtime for the card: ROCm's, with sudo amdgpu-install --usecase=opencl (add "
                 "--no-dkms to keep the distribution's in-box amdgpu kernel driver), or, with AMD's packaged driver, "
                 "only the OpenCL part of amdgpu-pro in headless mode, keeping the in-box driver: ./amdgpu-pro-install "
                 "-y --opencl=rocr,legacy --headless --no-dkms (rocr for Vega and newer, legacy for older cards); put "
                 "the user in the render and video groups, log in again, and check that clinfo lists the GPU",
                 [], lines[:2])
