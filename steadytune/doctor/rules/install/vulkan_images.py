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
