"""jaxlib's local-CUDA wheels (jaxlib X+cuda11.cudnn86, the jax[cuda11_cudnn86] / jax[cuda12_local] extras) bring no
CUDA libraries: they load the system's CUDA toolkit and cuDNN, and abort when one of them cannot be loaded. The
library named in the failure is often only the first one tried; what is missing on such machines is mostly cuDNN,
which the CUDA toolkit does not include and which is installed on its own, for the toolkit's CUDA.

Sources: jax-ml/jax#14931 (jaxlib 0.4.6+cuda11.cudnn86 aborting on a missing CUDA library with CUDA 11.8 installed; no
libcudnn* files on the machine; fixed by apt-get install libcudnn8=8.8.1.3-1+cuda11.8 libcudnn8-dev); JAX's install
docs (the local-CUDA wheels need CUDA and cuDNN installed; the pip-CUDA extra jax[cuda12] brings them as wheels);
NVIDIA's cuDNN package names (libcudnn8 / libcudnn8-dev with a +cudaX.Y version suffix; libcudnn9-cuda-12 from 9)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_LOCAL_WHEEL = re.compile(r"(?i)\bjaxlib\W{0,3}(?:=+\s*)?[\d.]+\+cuda(\d+)[.+-]?cudnn(\d)(\d)|"
                          r"\bjax\[cuda(\d+)_(?:cudnn(\d)(\d)|local)\]")
_LOAD_FAILED = re.compile(r"(?i)Could not load (?:dynamic )?library\s+'?(lib\w+\.so[.\d]*)|(lib(?:cu\w+|nv\w+)\.so[.\d]*): "
                          r"cannot open shared object file|Unable to load cuDNN|DNN library (?:is )?not found|"
                          r"Could not load cuDNN")
_TOOLKIT = re.compile(r"(?i)(?:release|cuda(?: toolkit)?)\s*(1[0-3])\.(\d)\b")
_CUDNN_SAID = re.compile(r"(?i)\bcudnn\s*v?(\d)\.(\d+)\b")


@rule("rocm-libs-missing")
def jaxlib_local_cuda_without_cudnn(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    wheel = _LOCAL_WHEEL.search(text)
    failed = _lines_matching(ctx, _LOAD_FAILED)
    if not wheel or not failed:
        return None
    g = wheel.groups()
    cuda_major = g[0] or g[3]
    toolkit = _TOOLKIT.search(text)
    cuda = f"{toolkit.group(1)}.{toolkit.group(2)}" if toolkit and toolkit.group(1) == cuda_major else f"{cuda_major}.x"
    said = _CUDNN_SAID.search(text)
    cudnn = f"{said.group(1)}.{said.group(2)}" if said else (f"{g[1]}.{g[2]}" if g[1] else (f"{g[4]}.{g[5]}" if g[4]
                                                                                           else None))
    if cudnn and cudnn.startswith("8"):
        packages = f"sudo apt-get install libcudnn8={cudnn}.*-1+cuda{cuda} libcudnn8-dev={cudnn}.*-1+cuda{cuda}"
    elif cudnn and cudnn.startswith("9"):
        # cuDNN 9's Debian/Ubuntu names carry the CUDA major: NVIDIA's own CUDA images install
        # NV_CUDNN_PACKAGE_NAME="libcudnn9-cuda-12" and NV_CUDNN_PACKAGE_DEV="libcudnn9-dev-cuda-12"
        # (gitlab.com/nvidia/container-images/cuda, ubuntu cudnn Dockerfiles); pytorch/xla#6835 pins libcudnn9-cuda-12
        packages = f"sudo apt-get install libcudnn9-cuda-{cuda_major} libcudnn9-dev-cuda-{cuda_major}"
    else:
        packages = (f"sudo apt-get install libcudnn8 libcudnn8-dev (the +cuda{cuda} build; cuDNN 9: "
                    f"libcudnn9-cuda-{cuda_major})")
    library = next((m for m in _LOAD_FAILED.search(failed[0].line).groups() if m), "a CUDA library")
    return _make("rocm-libs-missing", "jaxlib's local-CUDA build cannot load the system's CUDA libraries",
                 f"this jaxlib ({wheel.group(0)}) brings no CUDA libraries: it loads the system's CUDA {cuda} and "
                 f"cuDNN, and aborts when one of them is missing ({library} here); cuDNN is not part of the CUDA "
                 "toolkit and is the piece such machines most often lack",
                 f"check what the loader finds: ldconfig -p | grep -E 'libcudnn|libcublas' (no libcudnn* means cuDNN "
                 f"is not installed); install cuDNN for CUDA {cuda} from NVIDIA's repository: {packages}; then "
                 f"reinstall jax with the same extra; or move to the pip-CUDA build, which brings CUDA and cuDNN as "
                 f"wheels: pip install -U \"jax[cuda12]\"", [], failed[:1])
