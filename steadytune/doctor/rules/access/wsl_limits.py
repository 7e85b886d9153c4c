"""What the GPU under WSL 2 (or another Hyper-V guest with GPU paravirtualization) cannot do, whatever the driver: the
failure is the platform's, so no reinstall helps and the fix is a way around it or another platform.

- CUDA's graphics interop (cudaGraphicsGLRegisterImage / Buffer, cuGraphicsGLRegister*, cudaGLSetGLDevice ...): NVIDIA's
  CUDA on WSL user guide, "Features Not Yet Supported": "OpenGL-CUDA Interop is not yet supported. Applications
  relying on OpenGL will not work." (OutofAi/cudacanvas#2: copy the tensor to the host instead.)
- RAPIDS (cuDF, cuML, cuGraph, RMM) on a Pascal GPU under WSL 2: its memory calls fail with cudaErrorNotSupported
  (801); later architectures are not affected, and RAPIDS closed it as won't-fix (rapidsai/cudf#9753: a GPU of compute
  capability 7.0 or newer, a cloud machine, or RAPIDS 21.08; cudf#9427, #11382).
- A Hyper-V guest given the GPU through dxgkrnl (dxgkrnl-dkms, GPU-PV scripts) whose NVML says "GPU access blocked by
  the operating system": WSL mounts the host driver's user-space libraries into /usr/lib/wsl by itself, a plain guest
  needs them copied, and the D3D12 ones (libd3d12.so, libd3d12core.so, libdxcore.so) come from C:\\Program Files\\WSL\\lib
  since WSL moved to the Store, not only C:\\Windows\\System32\\lxss\\lib (staralt/dxgkrnl-dkms#7, whose maintainer's
  commands link the mixed-case name to the file: ln -s /usr/lib/wsl/lib/libd3d12core.so
  /usr/lib/wsl/lib/libD3D12Core.so)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.device_files import _WSL_SAID
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


def _wsl(ctx: Context) -> bool:
    return ctx.sheet.has("platform", "wsl") or bool(_WSL_SAID.search(_text(ctx)))


# CUDA's (runtime and driver API) graphics-interop calls, and interop said in words
_INTEROP_CALL = re.compile(r"\bcu(?:da)?Graphics(?:GL|EGL|VDPAU|Vk)?\w*|\bcu(?:da)?GL(?:SetGLDevice|Register\w*|Map\w*|"
                           r"GetDevices|Init)\b|(?i:\b(?:CUDA|cuda)[- ](?:OpenGL|GL|Vulkan) interop\w*)")
# the call refused: the OS's or the runtime's words for an unsupported operation
_REFUSED = re.compile(r"(?i)operation not supported|not supported on this OS|OS call failed|cudaErrorOperatingSystem|"
                      r"cudaErrorNotSupported|CUDA_ERROR_OPERATING_SYSTEM|CUDA_ERROR_NOT_SUPPORTED|\berror (?:304|801)\b|"
                      r"\bfail(?:s|ed|ure)\b|black (?:image|window|screen)")


@rule("wsl")
def wsl_graphics_interop(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: WSL, and a CUDA graphics-interop call (or interop said) that fails."""
    if not _wsl(ctx):
        return None
    calls = _lines_matching(ctx, _INTEROP_CALL)
    if not calls or not _REFUSED.search(_text(ctx)):
        return None
    call = _INTEROP_CALL.search(calls[0].line).group(0)
    return _first(_make(
        "wsl", "WSL 2 has no CUDA-OpenGL interop",
        f"{call} shares a buffer between CUDA and OpenGL (graphics interop), which CUDA under WSL 2 does not support "
        "(NVIDIA's CUDA on WSL guide: OpenGL-CUDA interop is not yet supported), whatever the driver or the library",
        "go around the interop: copy the result to the host and upload it as an ordinary texture (a torch tensor: "
        "tensor.cpu().numpy(), then glTexImage2D / the viewer's CPU path), slower but it works under WSL; for the "
        "zero-copy path run the program on native Linux (or a Linux VM with the GPU passed through) or native Windows",
        [], calls[:1]))


_RAPIDS = re.compile(r"(?i)(?<![\w-])(?:cudf|cuml|cugraph|cuspatial|cuxfilter|rmm|dask[-_]cudf|rapids(?:ai)?)(?![\w-])")
_NOT_SUPPORTED = re.compile(r"(?i)cudaErrorNotSupported|\b801\b.{0,40}operation not supported|operation not supported")
# Pascal (sm_60/61) and Maxwell cards by name, where the facts hold no compute capability
_PASCAL_NAMED = re.compile(r"(?i)\bGTX ?10[5-8]0\b|\bGeForce 10\d{2}\b|\bTitan ?Xp?\b|\bQuadro P\d{3,4}\b|\bTesla P(?:4|40|100)\b|"
                           r"\bMX ?[12]\d0\b|\bPascal\b")


@rule("wsl")
def rapids_pascal_under_wsl(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: WSL, a RAPIDS library named, its "operation not supported", and no GPU of compute capability 7.0
    or newer shown (such a GPU is another cause)."""
    text = _text(ctx)
    if not _wsl(ctx) or not _RAPIDS.search(text):
        return None
    said = _lines_matching(ctx, _NOT_SUPPORTED)
    if not said:
        return None
    capabilities = [int(a[3:]) for a in ctx.sheet.machine_archs if re.fullmatch(r"sm_\d+", a)]
    if capabilities and min(capabilities) >= 70:
        return None
    named = _PASCAL_NAMED.search(text)
    shown = (f"this GPU ({named.group(0)}) is Pascal or older" if named else
             f"this GPU (sm_{min(capabilities)}) is Pascal or older" if capabilities else
             "a GeForce 10-series or other Pascal GPU is the known cause")
    return _first(_make(
        "wsl", "RAPIDS does not run on a Pascal GPU under WSL 2",
        "RAPIDS under WSL 2 needs a GPU of compute capability 7.0 or newer (Volta, Turing, Ampere and later): on Pascal "
        "(GeForce 10-series, Quadro P, Tesla P100/P40) and older, its memory calls fail with cudaErrorNotSupported "
        f"(801) there, which RAPIDS closed as won't-fix (cudf#9753); {shown}",
        "run RAPIDS where the Pascal card works, native Linux (dual boot), or on a GPU of compute capability 7.0 or "
        "newer (a newer card, a cloud machine); or keep RAPIDS 21.08, the last release reported working on Pascal "
        "under WSL 2 (later RAPIDS, from 24.02, drops Pascal everywhere)", [], said[:1]))


_BLOCKED = re.compile(r"(?i)GPU access blocked by the operating system")
# a Hyper-V guest given the GPU by hand, not WSL: dxgkrnl built as a module, GPU-PV scripts, a VM, a driver "loaded"
_GUEST = re.compile(r"(?i)\bdxgkrnl\b|\bHyper-?V\b|\bGPU[- ]?PV\b|\bGPU[- ]partition\w*|\bvirtual machine\b|\bVM\b|"
                    r"\bdkms\b|\b(?:driver|module)s? (?:is |was )?(?:installed and |built and )?loaded\b|"
                    r"Copy-HostGPUDriver|\bAdd-VMGpuPartitionAdapter\b")


@rule("wsl")
def gpu_pv_guest_libraries(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: NVML's "GPU access blocked by the operating system" where the paste is a guest with dxgkrnl of its
    own (a module installed and loaded, Hyper-V, GPU-PV), not WSL's own distribution."""
    blocked = _lines_matching(ctx, _BLOCKED)
    if not blocked or not _GUEST.search(_text(ctx)):
        return None
    return _first(_make(
        "wsl", "the GPU-PV guest lacks the host driver's D3D12 libraries",
        "this Linux guest reaches the GPU through dxgkrnl (GPU paravirtualization), and the NVIDIA user-space driver "
        "there runs on the host's D3D12 libraries (libd3d12.so, libd3d12core.so, libdxcore.so); WSL mounts them by "
        "itself, a guest needs them copied, and since WSL moved to the Store they live in C:\\Program Files\\WSL\\lib, "
        "not only C:\\Windows\\System32\\lxss\\lib: without them NVML is refused",
        "copy the host's driver files into the guest again, the D3D12 ones included: C:\\Windows\\System32\\lxss\\lib "
        "and C:\\Program Files\\WSL\\lib (libd3d12.so, libd3d12core.so, libdxcore.so) into /usr/lib/wsl/lib, the "
        "driver's folder from C:\\Windows\\System32\\DriverStore\\FileRepository\\nv_dispi.inf_amd64_* into "
        "/usr/lib/wsl/drivers (the GPU-PV provisioning scripts do both); link the name the loader asks for where the "
        "case differs (ln -s /usr/lib/wsl/lib/libd3d12core.so /usr/lib/wsl/lib/libD3D12Core.so), sudo ldconfig, then "
        "/usr/lib/wsl/lib/nvidia-smi",
        [], blocked[:1]))
