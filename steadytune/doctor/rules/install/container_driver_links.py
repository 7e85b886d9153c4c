"""nvidia-smi inside a container that cannot load NVML ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your
system") while it works on the host (rocm-libs-missing). The driver's user-space libraries reach a container only
through the NVIDIA container runtime (docker run --gpus all, compose's gpus / deploy.resources device request), which
mounts the host's versioned files (libnvidia-ml.so.<driver version>, libcuda.so.<driver version>) and makes their .so.1
links; a container started without it has none, and one whose image holds stale or dangling .so.1 links (an image
built on another driver, a copied library folder) has links that point nowhere. In that order: start it with the GPU
runtime; then recreate the links to the mounted versioned files.

Sources: NVIDIA Container Toolkit's docs (docker run --gpus; the toolkit injects the driver's libraries at run time);
ldconfig(8) (the .so.1 name is a link to the versioned file); warmshao/FasterLivePortrait#8 (the maintainers: ls the
library folder and ln -sf libnvidia-ml.so.<version> libnvidia-ml.so.1, the same for libcuda.so.1; confirmed)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_NO_NVML = re.compile(r"(?i)NVIDIA-SMI couldn'?t find libnvidia-ml\.so library|libnvidia-ml\.so(?:\.1)?: cannot open "
                      r"shared object file")
_CONTAINER = re.compile(r"(?i)\bdocker\b|\bcontainer\b|\bpodman\b|\bimage\b")
# the host works: "I can run nvidia-smi outside docker", "on the host nvidia-smi works"
_HOST_WORKS = re.compile(r"(?i)\b(?:outside|on the host|host(?:'s)? nvidia-smi|outside of)\b")
_GPU_RUNTIME = re.compile(r"(?i)--gpus\b|--runtime[= ]nvidia|\bruntime:\s*nvidia\b|driver:\s*nvidia\b|"
                          r"--device\s+nvidia\.com/gpu|NVIDIA_VISIBLE_DEVICES=")
_WSL = re.compile(r"(?i)\bWSL\b|/usr/lib/wsl\b")


@rule("rocm-libs-missing")
def container_driver_links(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: NVML not found by nvidia-smi in a container, the host's nvidia-smi working, not WSL (wsl.py's)."""
    text = _text(ctx)
    said = _lines_matching(ctx, _NO_NVML)
    if not said or not _CONTAINER.search(text) or not _HOST_WORKS.search(text) or _WSL.search(text):
        return None
    links = ("check the links inside the container: ls -l /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* "
             "/usr/lib/x86_64-linux-gnu/libcuda.so* (the versioned files carry the host driver's version, as "
             "nvidia-smi on the host prints it); where the .so.1 link is missing or dangling, recreate it: cd "
             "/usr/lib/x86_64-linux-gnu && ln -sf libnvidia-ml.so.<driver version> libnvidia-ml.so.1 && ln -sf "
             "libcuda.so.<driver version> libcuda.so.1 && ldconfig")
    runtime = ("" if _GPU_RUNTIME.search(text) else
               "start the container with the GPU runtime first: docker run --gpus all ... (the NVIDIA Container "
               "Toolkit installed on the host; compose: gpus: all or a deploy.resources device request); if it "
               "still fails, ")
    return _first(_make(
        "rocm-libs-missing", "the container has no working link to the host driver's NVML",
        "nvidia-smi inside the container cannot load libnvidia-ml.so.1 although the host's driver works: the driver's "
        "libraries reach a container only through the NVIDIA container runtime, which mounts the host's versioned "
        "files; without it, or with the image's own stale .so.1 links in the way, the name points nowhere",
        runtime + links, [], said[:1]))
