"""An app's prebuilt CUDA container image whose torch has no kernels for the GPU ("no kernel image is available for
execution on the device" from inside it): the image was built for one CUDA release's torch, and a GPU newer than that
build (a Blackwell / RTX 50 card under a cu121 torch) gets no code. Pulling the same tag again does not change it; the
app's Dockerfile takes the CUDA build as an argument, so the image is rebuilt with the one that carries the GPU.
Table: the app, how a paste names it, the build argument and the value that carries Blackwell (sm_120: torch's cu128
wheels). Source: open-webui's Dockerfile (ARG USE_CUDA_VER, "cu121 for CUDA 12"; later cu128) and open-webui#12469
(closed: rebuild with USE_CUDA_VER for the newer card)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


# (app, how a paste names it, the build command with its CUDA argument)
_IMAGES = (
    ("Open WebUI", re.compile(r"(?i)\bopen[- ]?webui\b"),
     "git clone https://github.com/open-webui/open-webui && cd open-webui && docker build --build-arg USE_CUDA=true "
     "--build-arg USE_CUDA_VER={cu} -t open-webui:{cu} . (then run that image in place of ghcr.io/open-webui/"
     "open-webui:cuda)"),
)
_NO_KERNEL = re.compile(r"(?i)no kernel image is available for execution")
_IMAGE = re.compile(r"(?i)\bdocker\b|\bimage\b|\bcontainer\b|:cuda\b|\bpodman\b")


@rule("arch-missing")
def app_image_without_gpu_arch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an app of the table named, run from its container image, and CUDA's no-kernel-image error."""
    text = _text(ctx)
    if not _IMAGE.search(text):
        return None
    app = next((row for row in _IMAGES if row[1].search(text)), None)
    lines = _lines_matching(ctx, _NO_KERNEL)
    if app is None or not lines:
        return None
    name, _, build = app
    sms = [int(f.value[3:]) for f in ctx.sheet.of("arch") if re.fullmatch(r"sm_\d{2,3}", f.value)]
    if sms and max(sms) < 70:
        return None   # a pre-Volta card: no newer CUDA build adds it (the general arch reading answers)
    cu = "cu128"
    return _first(_make(
        "arch-missing", f"{name}'s CUDA image has no kernels for this GPU",
        f"the prebuilt {name} CUDA image carries a torch built for one CUDA release; a GPU newer than that build "
        "(Blackwell / RTX 50 needs CUDA 12.8's torch) gets no code from it, whatever the host's driver and toolkit",
        f"rebuild the image with a CUDA build that carries the GPU: {build.format(cu=cu)}; nvidia-smi --query-gpu="
        "name,compute_cap --format=csv shows the GPU's compute capability (12.0 for RTX 50)",
        [ctx.line_fact(lines[0])], lines[:1]))
