"""A cuDNN sub-library loaded from a system CUDA folder (/usr/local/cuda/lib64, /usr/lib/x86_64-linux-gnu) fails with
an undefined symbol from its sibling ("libcudnn_cnn_train.so.8: undefined symbol: ..., version libcudnn_cnn_infer.so.8"):
cuDNN 8 is split into several libraries that must come from one release; torch's CUDA wheels bring theirs as pip's
nvidia-cudnn-cu1x (site-packages/nvidia/cudnn/lib), and a system folder on LD_LIBRARY_PATH is searched first, so the
process mixes two releases. Convolutions then fail ("GET was unable to find an engine", CUDNN_STATUS_*). The fix puts
pip's copy first or takes the system folder off the loader path.

Facts: torch's CUDA 11.7+ / 12 wheels depend on nvidia-cudnn-cu11 / -cu12 (their METADATA); GPT-SoVITS#490 (the system
cuDNN under /usr/local/cuda/lib64 loaded instead of the venv's; site-packages/nvidia/cudnn/lib first on
LD_LIBRARY_PATH fixed training).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule


_SYSTEM_CUDNN = re.compile(r"(/(?:usr/local/cuda[\w.-]*/(?:lib64|targets/[\w-]+/lib)|usr/lib(?:64)?(?:/x86_64-linux-gnu)?|"
                           r"opt/[\w.-]+/lib(?:64)?)/(libcudnn\w*\.so\.(\d+)))\S*:\s*undefined symbol")


@rule("abi-mismatch")
def system_cudnn_before_pips(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _SYSTEM_CUDNN)
    if not lines:
        return None
    path, library, major = _SYSTEM_CUDNN.search(lines[0].line).groups()
    folder = path.rsplit("/", 1)[0]
    # (cuDNN 9 wheels are nvidia-cudnn-cu12 only; cuDNN 8 came as -cu11 for cu117/cu118 torch and -cu12 for cu121)
    missing = ("pip install nvidia-cudnn-cu12" if major == "9" else
               "pip install the nvidia-cudnn-cu11 or -cu12 that torch's CUDA build names (pip show torch lists it)")
    # the path in the message settles it: the loader took a system cuDNN, not pip's; abi.py's generic "extension built
    # for another torch" reading of an undefined symbol does not apply to cuDNN's own libraries
    return _first(_make("abi-mismatch", f"a system cuDNN ({folder}) is loaded before the one pip installed with torch",
                        f"{library} came from {folder}, a cuDNN release other than the nvidia-cudnn wheel torch brought; "
                        "cuDNN's libraries must all come from one release, so the mix misses symbols and cuDNN finds "
                        "no engine for the convolution",
                        "put pip's cuDNN first for this environment: export LD_LIBRARY_PATH=<venv>/lib/python3.X/"
                        "site-packages/nvidia/cudnn/lib:$LD_LIBRARY_PATH (python -c \"import os, nvidia.cudnn.lib; print("
                        "os.path.dirname(nvidia.cudnn.lib.__file__))\" prints it), or take " + folder +
                        " off LD_LIBRARY_PATH (unset it, or drop that entry) so torch loads its own copies; if pip's is "
                        f"missing: {missing}",
                        [ctx.line_fact(lines[0])], lines + _lines_matching(ctx, r"unable to find an engine")))
