"""A TensorRT release that predates the GPU's generation (arch-missing): the builder refuses the card outright
("Target GPU SM 120 is not supported by this TensorRT release", "Internal Error (Unsupported SM: 0x809)"), whatever the
model. No setting brings kernels a release does not carry: the fix is the first TensorRT release that has the
generation, with the CUDA it is built for (a tar / pip package or a container image on that CUDA), then the engine
rebuilt from the ONNX on this card.

The table (generation's compute capability -> first TensorRT release, the CUDA its builds need):
- Ada (sm_89) and Hopper (sm_90): TensorRT 8.5 (NVIDIA/TensorRT#2727: 8.4.1.5 refused an RTX 4080 with Unsupported
  SM 0x809, 8.5.1.7 built it; the 8.5.3 support matrix lists CUDA 11.8 and cuDNN 8.6 for 8.5.x).
- Blackwell (sm_100, sm_120): TensorRT 10.8 (10.8.0 release notes: "This release supports NVIDIA Blackwell GPUs, such
  as the GeForce 50-series"; its Blackwell builds are the CUDA 12.8 ones).
The hexadecimal form is major << 8 | minor (0x809 = SM 8.9, 0xc00 = SM 12.0)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _release_numbers, rule, _text

# TensorRT's own refusals of the GPU: the 10.x wording with the SM in decimal, the 8.x one in hexadecimal
_REFUSED = re.compile(r"(?i)Target GPU SM (\d{2,3}) is not supported by this TensorRT release|"
                      r"Unsupported SM:?\s*(0x[0-9a-f]{3})\b")

# (lowest compute capability as digits, the generation, first TensorRT release, the CUDA its builds pair with)
_FIRST = (
    (100, "Blackwell", "10.8", "12.8"),
    (89, "Ada / Hopper", "8.5", "11.8"),
)

# the TensorRT release the paste shows: "TensorRT Version: 8.4.1.5", "[TensorRT v100700]", "TensorRT 8.4",
# "tensorrt==10.7.0"
# (not an NGC image's tag, nvcr.io/nvidia/tensorrt:24.08-py3, whose number is the container's release)
_SHOWN = re.compile(r"(?i)(?<![/\w])TensorRT(?:\s+Version)?[\s*:=]*v?(\d{1,2}\.\d+(?:\.\d+)*)\b|"
                    r"\[TensorRT v(\d{4,6})\]")
_CONTAINER = re.compile(r"(?i)\bdocker\b|\bimage\b|\bcontainer\b|nvcr\.io|Dockerfile|/usr/src/tensorrt")


def _capability(match: re.Match) -> int:
    if match.group(1):
        return int(match.group(1))
    value = int(match.group(2), 16)
    return (value >> 8) * 10 + (value & 0xFF)


def _shown_release(text: str) -> Optional[str]:
    """The TensorRT release the paste shows; trtexec's "[TensorRT v100700]" is NV_TENSORRT_VERSION, major * 1000 +
    minor * 100 + patch up to 8.x (v8601 = 8.6.1) and major * 10000 + minor * 100 + patch from 10.0 (v100700 =
    10.7.0)."""
    for m in _SHOWN.finditer(text):
        if m.group(1):
            if int(m.group(1).split(".")[0]) <= 20:
                return m.group(1)
            continue
        packed = int(m.group(2))
        major = packed // 10000 if len(m.group(2)) >= 6 else packed // 1000
        return f"{major}.{packed // 100 % (100 if len(m.group(2)) >= 6 else 10)}.{packed % 100}"
    return None


@rule("arch-missing")
def tensorrt_predates_the_gpu(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: TensorRT's own refusal of the GPU's SM; the SM it names gives the generation and so the release."""
    refused = _lines_matching(ctx, _REFUSED)
    if not refused:
        return None
    cc = _capability(_REFUSED.search(refused[0].line))
    row = next((r for r in _FIRST if cc >= r[0]), None)
    text = _text(ctx)
    shown = _shown_release(text)
    sm = f"SM {cc // 10}.{cc % 10}"
    if row is None:
        return None
    _, generation, release, cuda = row
    if shown and _release_numbers(shown) >= _release_numbers(release):
        return None   # a release that has the generation refuses it: something else (a build for another target)
    have = f"TensorRT {shown}" if shown else "this TensorRT"
    where = (f"move the image to CUDA {cuda} or newer with TensorRT {release} or newer (a base image built on CUDA "
             f"{cuda}; apt / pip inside it must bring the matching TensorRT)" if _CONTAINER.search(text) else
             f"install TensorRT {release} or newer, the build for CUDA {cuda} or newer (the tar / zip package from NVIDIA's TensorRT "
             f"download page), with the CUDA {cuda} toolkit and the cuDNN that release lists")
    return _first(_make("arch-missing", f"{have} predates the {generation} GPU ({sm})",
                        f"{have} carries no kernels for compute capability {sm}: TensorRT supports {generation} GPUs "
                        f"from {release}, built for CUDA {cuda}",
                        f"{where}; then rebuild the engine from the ONNX model on this GPU (trtexec --onnx=model.onnx "
                        "--saveEngine=model.engine): an engine is tied to the release and GPU that built it",
                        [], refused[:1]))
