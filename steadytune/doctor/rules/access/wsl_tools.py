"""WSL 2 and the ROCm pieces that meet Windows' adapters: the system-management tools, which read the native amdgpu
driver WSL does not have, and the WSL thunk, which asks every adapter Windows gives WSL for AMD's own adapter data.

Sources: AMD SMI's docs, "Using AMD SMI under WSL (experimental)" (AMD SMI reads the amdgpu driver through DRM
ioctls and sysfs, which WSL 2 does not have; its WSL backend is experimental and off in the default build and
packages); AMD's ROCm-on-WSL docs (rocminfo and HIP reach the GPU through /dev/dxg); ROCm/ROCm#4460 (rocminfo's
thunk_proxy QueryAdapterInfo assertion under WSL, traced by AMD to a second, NVIDIA adapter beside the Radeon and fixed
in a later WSL runtime)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.device_files import _WSL_SAID
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text


def _under_wsl(ctx: Context) -> bool:
    return ctx.sheet.has("platform", "wsl") or bool(_WSL_SAID.search(_text(ctx)))


_SMI = re.compile(r"(?i)\b(amd-smi|amdsmi|rocm-smi|rocm_smi)\b")
# the tools' own words for a machine without the amdgpu driver
_SMI_FAILED = re.compile(r"(?i)amdgpu not found in modules|driver not initiali[sz]ed|Unable to (?:get|detect any) "
                         r"(?:GPU )?devices|AMDSMI_STATUS_\w+|rsmi_init\w*\W.{0,40}fail|No AMD GPUs? (?:found|"
                         r"detected)|amdgpu (?:kernel )?(?:module|driver) (?:is )?not (?:loaded|found)")

_RUNTIME_FAILED = re.compile(r"(?i)hsa_init\w*\W{0,3}Failed|ROCk module is NOT loaded|No HIP GPUs are available|"
                             r"hipErrorNoDevice|is_available\(\)\W{0,5}False")


@rule("wsl")
def smi_under_wsl(ctx: Context) -> Optional[Diagnosis]:
    """amd-smi / rocm-smi finding no GPU under WSL 2: they read the native driver, which WSL does not have."""
    if not _under_wsl(ctx):
        return None
    failed = _lines_matching(ctx, _SMI_FAILED)
    named = _SMI.search(_text(ctx))
    if not failed or named is None:
        return None
    # the runtime itself failing too (rocminfo, HIP, torch): the WSL runtime is the problem, not the smi tool
    if _lines_matching(ctx, _RUNTIME_FAILED):
        return None
    tool = named.group(1).lower().replace("_", "-").replace("amdsmi", "amd-smi")
    return _first(_make(
        "wsl", f"{tool} does not work under WSL 2",
        f"{tool} reads the GPU through the native amdgpu kernel driver (its sysfs and DRM interfaces); under WSL 2 "
        "there is no amdgpu module and no /dev/kfd, the GPU is reached through the Windows driver over /dev/dxg, so "
        f"{tool} finds no device although ROCm itself can work",
        f"this {tool} error is expected under WSL 2 and needs no fix (modprobe amdgpu cannot help there): check the "
        "GPU with rocminfo, or python -c 'import torch; print(torch.cuda.get_device_name(0))' with a ROCm torch, and "
        "watch its use from Windows (Task Manager, AMD Software); AMD SMI's WSL backend is experimental and off in "
        "the default packages",
        [], failed))


# the ROCm WSL thunk (libhsakmt's thunk_proxy) asserting while it reads a D3DKMT adapter's AMD data
_ADAPTER_ASSERT = re.compile(r"(?i)thunk_proxy\S*.{0,80}QueryAdapterInfo|QueryAdapterInfo.{0,120}Assertion")
_OTHER_ADAPTER = re.compile(r"(?i)\b(?:(?:NVIDIA )?(?:GeForce )?(?:RTX|GTX) ?\d{3,4}(?: Ti| SUPER)?|NVIDIA|GeForce|"
                            r"Intel(?:\(R\))? (?:UHD|Iris|Arc)(?: Graphics)?)\b")


@rule("wsl")
def wsl_thunk_other_adapter(ctx: Context) -> Optional[Diagnosis]:
    """The WSL thunk's QueryAdapterInfo assertion: it queried an adapter that is not AMD's (a second GPU's)."""
    said = _lines_matching(ctx, _ADAPTER_ASSERT)
    if not said:
        return None
    other = _OTHER_ADAPTER.search(_text(ctx))
    return _first(_make(
        "wsl", "ROCm's WSL runtime aborts on a GPU adapter that is not AMD's",
        "the ROCm-on-WSL thunk asks every display adapter Windows passes to WSL for AMD's adapter information and "
        "asserts when one is not AMD's; the known case is a second, NVIDIA GPU beside the Radeon"
        + (f" (here: {other.group(0)})" if other else ""),
        "take the other adapter away from WSL while ROCm runs: disable the "
        + (f"{other.group(0)}" if other else "NVIDIA (or other non-AMD) GPU") + " in Windows Device Manager, then wsl --shutdown and start WSL again; rocminfo must then list the Radeon; keep it that way "
        "until a later ROCm for WSL release whose runtime skips non-AMD adapters is installed",
        [], said + [e for e in ctx.crashes() if e.line_no > said[0].line_no][:1]))
