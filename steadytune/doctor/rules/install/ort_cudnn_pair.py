"""onnxruntime-gpu beside a torch that pins the other cuDNN major: from 1.19, PyPI's onnxruntime-gpu is the CUDA 12 +
cuDNN 9 build and looks for libcudnn.so.9 (cudnn64_9.dll), while a torch before 2.4 brings cuDNN 8.9
(nvidia-cudnn-cu12 8.9.x) into the same environment. Two ways out, one per side: keep torch and take the last
onnxruntime-gpu whose CUDA 12 build used cuDNN 8 (1.18.0, from onnxruntime's CUDA 12 feed; 1.17.x there too), or move
torch to a release whose CUDA 12 wheels bring cuDNN 9 (2.4 and newer) so both share one.

Decided by: an onnxruntime release of 1.19 or newer, a cuDNN 8 said in the paste (nvidia-cudnn-cu12==8.x, "cuDNN 8.9"),
and cuDNN 9 asked for (libcudnn.so.9, cudnn64_9.dll, "cuDNN >= 9", "Require cuDNN 9.*"). Sources: onnxruntime.ai's
CUDA EP requirements (1.17: CUDA 12.2 + cuDNN 8.9 on the CUDA 12 feed; 1.19 and newer: CUDA 12 + cuDNN 9 on PyPI);
microsoft/onnxruntime#20829 (1.18.1's CUDA 12 packages were the first built with cuDNN 9); #22198 (torch's cuDNN 8.9
beside 1.19.2: onnxruntime-gpu 1.18.0 accepted); torch 2.4's wheels require nvidia-cudnn-cu12 9.1.0.70."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.onnxruntime_cuda import _release

_CUDNN8 = re.compile(r"(?i)nvidia-cudnn-cu1[12]\s*==\s*8\.|cuDNN\s*(?:==|=|:|version)?\s*v?8\.\d|libcudnn\.so\.8\b")
_WANTS_CUDNN9 = re.compile(r"(?i)libcudnn\w*\.so\.9\b|cudnn\w*64_9\.dll|cuDNN\s*(?:>=|≥)\s*9|Require cuDNN 9|cuDNN 9\.\*")
_CUDA12_FEED = "https://aiinfra.pkgs.visualstudio.com/PublicPackages/_packaging/onnxruntime-cuda-12/pypi/simple/"


@rule("abi-mismatch")
def onnxruntime_cudnn9_beside_torch_cudnn8(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    release = _release(text)
    if release is None or release < (1, 19) or not _CUDNN8.search(text):
        return None
    lines = _lines_matching(ctx, _WANTS_CUDNN9)
    if not lines:
        return None
    return _first(_make(
        "abi-mismatch", f"onnxruntime-gpu {release[0]}.{release[1]} wants cuDNN 9, the environment has torch's cuDNN 8",
        "onnxruntime-gpu 1.19 and newer are built against CUDA 12 and cuDNN 9, while the torch in this environment "
        "pins cuDNN 8.9 (nvidia-cudnn-cu12 8.x), so the CUDA provider finds no libcudnn.so.9; a CUDA 11 build of an "
        "older onnxruntime wants libcublas.so.11 instead",
        "match the two on one cuDNN: keep torch and install the last onnxruntime-gpu whose CUDA 12 build used cuDNN 8: "
        f"pip uninstall -y onnxruntime-gpu; pip install onnxruntime-gpu==1.18.0 --extra-index-url {_CUDA12_FEED} (the "
        "CUDA 12 + cuDNN 8.9 build; PyPI's 1.18 is the CUDA 11.8 one); or move torch to 2.4 or newer, whose CUDA 12 "
        "wheels bring cuDNN 9, and keep the new onnxruntime-gpu; onnxruntime.get_available_providers() and a session "
        "with providers=['CUDAExecutionProvider'] show it loads",
        [ctx.line_fact(lines[0])], lines[:1]))
