"""Under WSL 2, an image that carries its own NVIDIA driver libraries (wsl): the NVIDIA container hook mounts the WSL
driver's libraries (libcuda.so.1, libnvidia-ml.so.1 and their siblings from /usr/lib/wsl/lib) into the container's
library directory, and a file the image already has at that path stops it with "mount error: file creation failed:
...: file exists". The image's copies must go (a layer that deletes them), since under WSL the driver's libraries can
only be the ones Windows' driver provides; the Linux-host reading of the same message (driver packages installed in
the image) is the catalogue's container-driver-libs-in-image.

Sources: NVIDIA's CUDA on WSL user guide (the driver's libraries are mapped from Windows into /usr/lib/wsl/lib; no
Linux display driver is installed in WSL); knaw-huc/loghi#3 (the maintainer's image rebuilt with RUN rm -rf
/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1, confirmed)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_EXISTS = re.compile(r"(?i)nvidia-container-cli: mount error: file creation failed: \S*?/merged(/\S+?\.so[\d.]*): file exists")
_WSL = re.compile(r"(?i)\bWSL ?2?\b|/usr/lib/wsl\b|microsoft-standard-WSL2|WSL environment detected")


@rule("wsl")
def image_driver_libraries_under_wsl(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the hook's "file exists" for a driver library, and WSL named in the paste."""
    text = _text(ctx)
    found = _EXISTS.search(text)
    if not found or not _WSL.search(text):
        return None
    path = found.group(1)
    folder, name = path.rsplit("/", 1)
    # the two libraries the WSL driver mounts that images most often carry (NVML's and the CUDA driver's)
    paths = [path] + [f"{folder}/{other}" for other in ("libnvidia-ml.so.1", "libcuda.so.1") if other != name]
    return _first(_make(
        "wsl", "the image carries NVIDIA driver libraries that WSL's driver mounts over",
        f"under WSL 2 the NVIDIA container hook mounts the Windows driver's libraries into the container, and the "
        f"image already has its own {name} at {path}, so the mount fails with 'file exists'",
        f"delete the image's driver libraries and rebuild: add RUN rm -f {' '.join(paths)} to the Dockerfile (after "
        "any package that installs them; or do not install libnvidia-compute / libnvidia-ml packages in it), then "
        "docker build again; under WSL 2 the driver libraries must come from /usr/lib/wsl/lib at run time",
        [], _lines_matching(ctx, _EXISTS)[:1]))
