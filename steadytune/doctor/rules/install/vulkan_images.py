"""A ggml program's Vulkan backend that finds no device inside a container image: the Vulkan loader is there, but
Mesa's Vulkan drivers (RADV, ANV, the software ones) link the GL vendor-neutral dispatch libraries (libglvnd: libGLX,
libEGL, libGLdispatch), which a slim runtime image leaves out, so the ICD fails to load and no device is listed. The
fix is those libraries in the image, with the GPU's render node passed in.

Sources: ggml-org/llama.cpp#17761 (the official Vulkan image listing no device until libglvnd0 libgl1 libglx0 libegl1
libgles2 were installed, confirmed by the reporter, and added to the image's Dockerfile); Debian's package names for
libglvnd's libraries."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_NO_DEVICES = re.compile(r"ggml_vulkan: No devices found")
# a container image: said, or the llama.cpp images' /app folder of backends
_IMAGE = re.compile(r"(?i)\bdocker\b|\bpodman\b|\bcontainers?\b|(?<![\w/])/app/lib\w*\.so")
_RUN = re.compile(r"(?i)\b(?:docker|podman) run\b[^\n]*")
_PACKAGES = "libglvnd0 libgl1 libglx0 libegl1 libgles2"


@rule("rocm-libs-missing")
def vulkan_image_without_glvnd(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _NO_DEVICES)
    text = _text(ctx)
    if not said or not _IMAGE.search(text):
        return None
    run = _RUN.search(text)
    if run and not re.search(r"/dev/dri|--device|--gpus", run.group(0)):
        return None   # a run without the GPU's device: the loader reading (the catalogue's) comes first
    return _first(_make("rocm-libs-missing", "the container image lacks the libraries Mesa's Vulkan driver needs",
                        "the Vulkan backend found no device inside the image: the image has the Vulkan loader, but "
                        "Mesa's Vulkan drivers link libglvnd's GL dispatch libraries (libGLX, libEGL), which the slim "
                        "image does not carry, so no driver loads and no GPU is listed",
                        f"add them to the image: RUN apt-get update && apt-get install -y {_PACKAGES} "
                        "mesa-vulkan-drivers (or, in a running container, apt-get install -y the same), and run it "
                        "with the GPU's render node: docker run --device /dev/dri ...; vulkaninfo --summary inside the "
                        "container must list the GPU", [], said[:1]))


# a Vulkan renderer that enumerated no physical device (Omniverse Kit / Isaac Sim's carb.graphics-vulkan, the loader's
# own words, a program's "no Vulkan device"), not ggml's line (the image reading above)
_NO_PHYSICAL = re.compile(r"(?i)vkEnumeratePhysicalDevices failed|No physical devices? (?:is |was )?found|"
                          r"vkEnumeratePhysicalDevices\b.{0,40}\b(?:0|zero|no) (?:physical )?devices|"
                          r"failed to find (?:a |any )?(?:suitable )?(?:Vulkan )?physical device|"
                          r"no Vulkan(?:-capable)? (?:physical )?devices? (?:found|available)")
_NVIDIA = re.compile(r"(?i)\bNVIDIA\b|\bRTX\b|\bGeForce\b|\bTesla\b|\b[AHL]\d{2,3}\b|\bIsaac\b|\bOmniverse\b|carb\.")


@rule("rocm-libs-missing")
def vulkan_without_user_space_libraries(ctx: Context) -> Optional[Diagnosis]:
    """A Vulkan program on an NVIDIA machine (a cloud GPU server, a fresh install: Isaac Sim, Omniverse, a game
    engine) that enumerates no physical device: the NVIDIA driver's Vulkan ICD (nvidia_icd.json -> libGLX_nvidia) is
    loaded through libglvnd, so without libEGL / libGLX and the Vulkan loader installed, or with a driver installed
    without its GL / Vulkan part (a headless or compute-only package), the loader lists no device. Source:
    StanfordVL/BEHAVIOR-1K#1048 (Isaac Sim on a cloud GPU server: "vkEnumeratePhysicalDevices failed. No physical
    device is found", solved by apt install libegl1, with vulkan-tools libvulkan1 libglu1-mesa-dev where needed);
    Ubuntu's libnvidia-gl-<branch> package carries the driver's Vulkan ICD. Decided by: the no-device line and an
    NVIDIA machine or an NVIDIA renderer (Omniverse's carb plug-ins) named."""
    said = _lines_matching(ctx, _NO_PHYSICAL)
    text = _text(ctx)
    if not said or not _NVIDIA.search(text) or re.search(r"(?i)\bWSL\b|microsoft-standard", text):
        return None
    contained = bool(_IMAGE.search(text))
    return _make("rocm-libs-missing", "Vulkan finds no GPU: the libraries the NVIDIA Vulkan driver loads are missing",
                 "the NVIDIA driver's Vulkan ICD (/usr/share/vulkan/icd.d/nvidia_icd.json, libGLX_nvidia) is loaded "
                 "through the Vulkan loader and libglvnd's libEGL / libGLX; a server or minimal install without them "
                 "(or a driver installed without its GL / Vulkan part) leaves the loader with no physical device, "
                 "although nvidia-smi and CUDA work",
                 "install them: sudo apt-get install -y libegl1 libvulkan1 vulkan-tools (libglu1-mesa-dev where the "
                 "program asks for GLU); check that /usr/share/vulkan/icd.d/nvidia_icd.json exists - a headless or "
                 "compute-only driver package has none: install the driver's GL package of the same branch "
                 "(libnvidia-gl-<branch> on Ubuntu)"
                 + ("; in a container, run it with -e NVIDIA_DRIVER_CAPABILITIES=all (graphics brings the Vulkan ICD) "
                    if contained else "")
                 + "; vulkaninfo --summary must then list the NVIDIA GPU", [], said[:1])
