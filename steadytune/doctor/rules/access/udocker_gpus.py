"""A CUDA program in a udocker container told its driver is "insufficient for CUDA runtime version" (round 18,
r18b). udocker runs docker images in user space (Kaggle, Colab, batch clusters) without the NVIDIA Container Runtime,
so the host's driver libraries (libcuda) are not put into the container unless `udocker setup --nvidia <container>`
copies them in (udocker's own users' scripts: "udocker setup --nvidia --force <container>"); without them, or with a
host driver older than the image's CUDA, the image's runtime finds no usable driver. TabbyML/tabby#998 (Kaggle):
the maintainer's answer was to skip the image and run tabby's prebuilt Linux CUDA binary, the release asset
tabby_x86_64-manylinux2014-cuda<version> (tabby's release assets and its own deployment scripts use that name), and
the reporter confirmed it worked."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_INSUFFICIENT = re.compile(r"(?i)driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver|"
                           r"CUDA error 35\b")
_UDOCKER = re.compile(r"(?i)\budocker\b")
# programs that publish a native Linux CUDA build beside their image (asset name as the release carries it)
_NATIVE = {"tabby": "the tabby_x86_64-manylinux2014-cuda<version> release asset (unzip it, chmod +x, run tabby serve "
                    "--device cuda with the same model)"}


@rule("driver")
def udocker_without_host_driver(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _INSUFFICIENT)
    text = _text(ctx)
    if not said or not _UDOCKER.search(text):
        return None
    program = next((p for p in _NATIVE if re.search(rf"(?i)\b{p}\b", text)), None)
    native = (f"run the program outside the container, from its prebuilt Linux CUDA build: {_NATIVE[program]}"
              if program else "run the program outside the container, from its own prebuilt Linux (manylinux) CUDA "
              "build or pip package")
    return _first(_make("driver", "the udocker container has no usable NVIDIA driver",
                        "udocker runs the image without the NVIDIA Container Runtime: the host's driver library "
                        "(libcuda) is not in the container unless udocker copies it in, so the image's CUDA runtime "
                        "finds no driver of its version",
                        f"{native}; or give the container the host's driver: udocker setup --nvidia --force "
                        "<container> (then udocker run it again; nvidia-smi on the host must show a CUDA Version at "
                        "least the image's)", [], said))
