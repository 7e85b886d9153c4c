"""PyG's compiled extensions (torch-scatter, torch-sparse, torch-cluster, torch-spline-conv) for CUDA 11 under a
torch 1.x pip wheel. torch's 1.x pip wheels link cuSPARSE, cuSOLVER, cuRAND and cuFFT statically into
libtorch_cuda.so and ship no libcusparse.so.11 of their own (pytorch/builder manywheel/build_cuda.sh, release/1.12 and
release/1.13: ATEN_STATIC_CUDA=1, USE_CUDA_STATIC_LINK=1; cuBLAS, and for CUDA 11 cuDNN, are shared libraries it bundles
in torch/lib or, in 1.13's PyPI wheel, takes from nvidia-cublas-cu11 / nvidia-cudnn-cu11; cuSPARSE, cuSOLVER, cuRAND and
cuFFT come as nvidia-* wheels only from 2.0's PyPI wheel, release/2.0), while PyG's CUDA 11 builds of the extensions
load them as shared libraries: on a machine without the CUDA 11 toolkit on the loader's path
the import fails with "libcusparse.so.11: cannot open shared object file". The pair that works without a toolkit is
torch and the PyG wheels of CUDA 10.2 (every torch from 1.5 to 1.12 has a cu102 build; PyG's wheel pages
data.pyg.org/whl/torch-<release>+cu102.html): pytorch_geometric issue 2040, where users fixed it that way. The same
holds for any extension built for CUDA 11 beside such a torch (torch itself never loads the library), read where the
paste says a CUDA 11 torch 1.x and shows no toolkit of its own.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_PYG = re.compile(r"(?i)\btorch[_-](?:scatter|sparse|cluster|spline[_-]conv)\b|\bpytorch[_ -]geometric\b|\btorch_geometric\b|"
                  r"\bPyG\b")
# (not cuBLAS: a CUDA 11 torch 1.x wheel ships libcublas.so.11 itself, in torch/lib or as nvidia-cublas-cu11)
_CUDA11_LIBRARY = re.compile(r"\blib(cusparse|cusolver|curand|cufft)\.so\.11\b")
_NOT_LOADED = re.compile(r"(?i)cannot open shared object file|No such file or directory|not found")
_TORCH_1X = re.compile(r"(?i)\b(?:py)?torch\b\W{0,3}(?:version\W{0,3})?(?:==)?\s*(1)\.(\d{1,2})(?:\.(\d))?")


@rule("rocm-libs-missing")
def pyg_cuda11_extension_without_its_libraries(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    lines = [l for l in _lines_matching(ctx, _CUDA11_LIBRARY) if _NOT_LOADED.search(l.line)]
    if not lines:
        return None
    # PyG named, or a torch extension beside a torch 1.x that itself needs no such library (torch alone never loads
    # it): the same reading, the extension's own CUDA 10.2 build in words
    pyg = bool(_PYG.search(text))
    torch = _TORCH_1X.search(text)
    if torch is None or not (5 <= int(torch.group(2)) <= 12):
        # torch 1.13 links them statically too, but has no cu102 build for the pair (cu116 / cu117 only); from 2.0
        # PyPI's wheels bring them as nvidia-* wheels: libraries_missing's reading either way
        return None
    release = f"1.{torch.group(2)}.{torch.group(3) or 0}"
    name = _CUDA11_LIBRARY.search(lines[0].line).group(0)
    if not pyg and (re.search(r"(?i)\bnvcc\b|/usr/local/cuda|cuda[-_ ]?toolkit", text) or
                    not re.search(r"(?i)\bcu(?:da)?\s*11\.\d\b|\+cu11\d\b", text)):
        return None   # a toolkit shown, or no CUDA 11 torch said: libraries_missing's readings
    extension = "PyG extension (torch-sparse / torch-scatter ...)" if pyg else "extension"
    pair = (f"pip install torch-scatter torch-sparse torch-cluster torch-spline-conv -f https://data.pyg.org/whl/"
            f"torch-{release}+cu102.html" if pyg else
            f"then the extension's own CUDA 10.2 build for torch {release} (PyG's: pip install torch-scatter "
            f"torch-sparse -f https://data.pyg.org/whl/torch-{release}+cu102.html)")
    return _make("rocm-libs-missing", f"a CUDA 11 extension needs {name}, which torch {release}'s wheel does not ship",
                 f"the {extension} built for CUDA 11 loads {name} as a shared "
                 f"library; torch {release}'s pip wheel links cuSPARSE, cuSOLVER, cuRAND and cuFFT statically and "
                 "ships no shared copy, so it is found only where a CUDA 11 toolkit is on the loader's path",
                 f"move torch and the {'PyG wheels' if pyg else 'extension'} together to their CUDA 10.2 builds: "
                 + ("pip uninstall -y torch-scatter torch-sparse torch-cluster torch-spline-conv; " if pyg else "")
                 + f"pip install torch=={release}+cu102 -f https://download.pytorch.org/whl/torch_stable.html; "
                 f"{pair}; or keep "
                 f"CUDA 11 and put a CUDA 11 toolkit's lib64 on the loader's path (export LD_LIBRARY_PATH=/usr/local/"
                 "cuda-11.1/lib64:$LD_LIBRARY_PATH, the toolkit of torch's CUDA)",
                 [ctx.line_fact(lines[0])], lines[:1])
