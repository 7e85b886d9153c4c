"""TensorFlow 1.x's own check of the cuDNN it loads: "Loaded runtime CuDNN library: 6021 (compatibility version 6000)
but source was compiled with 5105 (compatibility version 5100)". The wheel is built for one cuDNN major; a machine
with another (often a shared server where the user cannot install a second cuDNN) needs the TensorFlow release built
for the cuDNN it has, or that cuDNN beside it in user space. The tested-build table gives the release per cuDNN.
(The newer wording "Loaded runtime CuDNN library: 8.0.5 but source was compiled with: 8.1.0", same major, older minor,
is rules/libraries.py's reading.)

Facts: tensorflow.org/install/source, "Tested build configurations" (Linux GPU): tensorflow_gpu-1.0.0 to 1.2.0 cuDNN 5.1
CUDA 8; 1.3.0 and 1.4.0 cuDNN 6 CUDA 8; 1.5.0 to 1.12.0 cuDNN 7 CUDA 9; 1.13.1, 1.14.0 and 2.0.0 cuDNN 7.4 CUDA 10.0;
2.1.0 and 2.2.0 cuDNN 7.6 CUDA 10.1. segmentation_keras#32: tensorflow-gpu==1.3.0 on a cuDNN 6 server.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule


# cuDNN release (major, minor) -> the tensorflow-gpu releases built for it, and their CUDA
_TF_FOR_CUDNN = {
    (5, 1): ("tensorflow-gpu==1.2.0", "1.0.0 to 1.2.x", "8"),
    (6, 0): ("tensorflow-gpu==1.3.0", "1.3.0 or 1.4.0", "8"),
    (7, 0): ("tensorflow-gpu==1.12.0", "1.5.0 to 1.12.0", "9"),
    (7, 4): ("tensorflow-gpu==1.14.0", "1.13.1, 1.14.0 or 2.0.0", "10.0"),
    (7, 6): ("tensorflow-gpu==2.2.0", "2.1.0 or 2.2.0", "10.1"),
}

# the 1.x wording: four-digit cuDNN numbers (6021 = 6.0.21) and their compatibility versions
_OLD_CHECK = re.compile(r"(?i)Loaded runtime CuDNN library:\s*(\d)(\d)(\d{2})\b.{0,60}?but source was compiled with:?\s*"
                        r"(\d)(\d)(\d{2})\b")


def _row(major: int, minor: int):
    """The table's row for a cuDNN: its exact minor, else the newest row of that major at or below it."""
    rows = sorted((k for k in _TF_FOR_CUDNN if k[0] == major and k[1] <= minor), reverse=True)
    return (rows[0], _TF_FOR_CUDNN[rows[0]]) if rows else (None, None)


@rule("abi-mismatch")
def tensorflow_built_for_another_cudnn(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _OLD_CHECK)
    if not lines:
        return None
    g = [int(x) for x in _OLD_CHECK.search(lines[0].line).groups()]
    runtime, built = (g[0], g[1]), (g[3], g[4])
    have, want = f"{runtime[0]}.{runtime[1]}", f"{built[0]}.{built[1]}"
    key, row = _row(*runtime)
    if row is not None:
        pin, releases, cuda = row
        first = (f"install the TensorFlow built for the cuDNN {have} this machine has: pip uninstall -y tensorflow-gpu "
                 f"tensorflow; pip install {pin} (releases {releases} are the cuDNN {key[0]}.{key[1]} builds, for "
                 f"CUDA {cuda}); or ")
    else:
        first = ""
    return _make("abi-mismatch", f"TensorFlow was built for cuDNN {want}, the machine has {have}",
                 f"the installed TensorFlow was compiled against cuDNN {want}; the cuDNN it loads is {have}, another "
                 "major, which it refuses",
                 f"{first}put cuDNN {want} beside it without root: unpack NVIDIA's cuDNN {want} archive for that CUDA "
                 "into your home (or conda install cudnn={want} in a conda environment) and export "
                 "LD_LIBRARY_PATH=<its lib64>:$LD_LIBRARY_PATH before starting Python",
                 [ctx.line_fact(lines[0])], lines[:1])
