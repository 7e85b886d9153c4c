"""A GPU rasterizer that cannot open its EGL display: nvdiffrast's OpenGL context (glutil.cpp: "eglGetDisplay() failed",
"eglInitialize() failed") and the programs that render through it. Headless OpenGL on an NVIDIA GPU goes through the
driver's own EGL library (libEGL_nvidia, registered with glvnd); when it is absent, not the driver's version, or not
mounted into a container, EGL has no display to give. Two answers, by what the program offers:
- a program with a switch to nvdiffrast's CUDA rasterizer (no EGL at all): that switch (device-access: the EGL display
  is what cannot be reached, and the CUDA path does not need it);
- otherwise the driver's EGL/OpenGL part: reinstall the driver with its OpenGL libraries (driver), the CUDA rasterizer
  as the way around it where the code can choose it.

Sources: nvdiffrast's documentation (RasterizeGLContext needs EGL from the NVIDIA driver in headless use;
RasterizeCudaContext from 0.3.0 needs none; its Dockerfile installs libegl1 and sets NVIDIA_DRIVER_CAPABILITIES to
include graphics); NVlabs/nvdiffrast issue 58 (eglInitialize failed, fixed by reinstalling the driver with its OpenGL
parts); threestudio's configs (system.renderer.context_type and system.exporter.context_type: gl or cuda;
threestudio-project/threestudio issue 231)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _CONTAINED, _lines_matching, _make, _text, rule

# EGL refusing its display or its initialisation (nvdiffrast's glutil.cpp, other EGL users' words)
_NO_EGL = re.compile(r"(?i)\begl(?:GetDisplay|GetPlatformDisplay(?:EXT)?|Initialize|QueryDevicesEXT)\(\) failed|"
                     r"\bEGL_NOT_INITIALIZED\b|\b(?:failed to|could not|unable to) (?:initiali[sz]e|open|get) (?:an? )?EGL\b"
                     r"(?: display)?|\bEGL_BAD_(?:DISPLAY|ACCESS)\b")


class CudaRasterizer(NamedTuple):
    program: str
    names: re.Pattern
    switch: str     # how to use nvdiffrast's CUDA rasterizer instead of its OpenGL one


# programs that render through nvdiffrast and can be told to use its CUDA rasterizer
_SWITCHES = (
    CudaRasterizer("threestudio", re.compile(r"(?i)\bthreestudio\b|\bNVDiffRasterizer\b|\bsystem\.renderer\."),
                   "system.renderer.context_type=cuda on the launch command (python launch.py --config ... --train "
                   "system.renderer.context_type=cuda), and system.exporter.context_type=cuda when exporting a mesh"),
)


@rule("device-access")
def egl_display_with_a_cuda_switch(ctx: Context) -> Optional[Diagnosis]:
    """No EGL display, in a program that can render with nvdiffrast's CUDA rasterizer instead."""
    lines = _lines_matching(ctx, _NO_EGL)
    if not lines:
        return None
    text = _text(ctx)
    row = next((r for r in _SWITCHES if r.names.search(text)), None)
    if row is None:
        return None
    return _make("device-access", f"{row.program}'s OpenGL rasterizer gets no EGL display",
                 f"{row.program} renders through nvdiffrast's OpenGL context, which needs an EGL display from the "
                 "NVIDIA driver's EGL library; none is reachable here (installing Mesa's EGL headers builds it but "
                 "gives no NVIDIA display, and a container or a remote session often has none)",
                 f"use nvdiffrast's CUDA rasterizer, which needs no EGL: {row.switch}; to keep OpenGL, the NVIDIA "
                 "driver's EGL (libEGL_nvidia, with NVIDIA_DRIVER_CAPABILITIES=all in a container) must be there",
                 [ctx.line_fact(lines[0])], lines[:1])


@rule("driver")
def egl_display_from_the_driver(ctx: Context) -> Optional[Diagnosis]:
    """No EGL display for nvdiffrast's OpenGL context, with no program switch known: the driver's EGL/OpenGL part."""
    lines = _lines_matching(ctx, _NO_EGL)
    if not lines:
        return None
    text = _text(ctx)
    if any(r.names.search(text) for r in _SWITCHES):
        return None
    if not re.search(r"(?i)\bnvdiffrast\b|\bglutil\.(?:cpp|h)\b|\bRasterizeGLContext\b|\bNVIDIA\b|\b[RG]TX\b", text):
        return None
    container = bool(_CONTAINED.search(text))
    rasterizer = bool(re.search(r"(?i)\bnvdiffrast\b|\bglutil\.(?:cpp|h)\b|\bRasterize(?:GL|Cuda)Context\b", text))
    what = "nvdiffrast's OpenGL rasterizer" if rasterizer else "the program's headless OpenGL"
    around = ("; or render without EGL through nvdiffrast's CUDA rasterizer (dr.RasterizeCudaContext() instead of "
              "dr.RasterizeGLContext(), nvdiffrast 0.3 or newer)" if rasterizer else "")
    mount = ("; a container gets the host's EGL/OpenGL libraries only with the graphics capability: run it with "
             "--gpus all -e NVIDIA_DRIVER_CAPABILITIES=all (nvdiffrast's Dockerfile sets it) and libegl1 inside"
             if container else "")
    return _make("driver", "the NVIDIA driver's EGL/OpenGL part does not answer",
                 f"{what} opens an EGL display through the NVIDIA driver's EGL library "
                 "(libEGL_nvidia); it failed, so that part of the driver is missing, of another version than the "
                 "kernel module, or was left out at install" + (" (in a container it comes from the host's driver)"
                                                                 if container else ""),
                 "reinstall the NVIDIA driver on the host with its OpenGL/EGL libraries (the .run installer without "
                 "--no-opengl-files; Ubuntu: the nvidia-driver-<branch> package, which brings libnvidia-gl-<branch>), "
                 f"then reboot{mount}{around}", [ctx.line_fact(lines[0])], lines[:1])
