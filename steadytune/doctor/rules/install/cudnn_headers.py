"""A CUDA extension build that does not find cudnn.h. torch's ATen/cudnn headers include <cudnn.h>, but torch's
wheels carry cuDNN's libraries, not its headers, and torch.utils.cpp_extension adds only CUDA_HOME's include folder:
cuDNN's comes from the variables the project's build reads. Transformer Engine's (build_tools/utils.py,
cudnn_path()) reads CUDNN_PATH, then CUDNN_HOME, then the nvidia-cudnn pip wheel; apex's and others' read
CUDNN_HOME / CUDNN_INCLUDE_DIR; CXXFLAGS and a module's CUDNN_ROOT are not among them (nvcc's command lines are built
by the extension's setup, which ignores CXXFLAGS for .cu files)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule

_NO_CUDNN_H = re.compile(r"(?i)\bcudnn(?:_version)?\.h\W{0,3}(?::\s*)?No such file or directory|cannot open (?:source|"
                         r"include) file\W{0,3}cudnn(?:_version)?\.h|Could not find cudnn\.h|cudnn\.h\W{0,3}not found")
# where the user's environment already says cuDNN is: a module's variable (Lmod / EasyBuild), a conda prefix
_ROOT_VAR = re.compile(r"\$\{?(CUDNN_(?:ROOT|HOME|DIR|PATH)|EBROOTCUDNN)\b")


@rule("rocm-libs-missing")
def cudnn_header_not_found(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _NO_CUDNN_H) if "cudnn" in _text(ctx).lower() else []
    if not lines:
        return None
    text = _text(ctx)
    var = _ROOT_VAR.search(text)
    root = f"${var.group(1)}" if var else "<the cuDNN root: the folder with include/cudnn.h>"
    te = re.search(r"(?i)transformer[-_ ]?engine|\bTE\b", text)
    return _make("rocm-libs-missing", "the extension build does not find cudnn.h",
                 "the build compiles code that includes cudnn.h (torch's ATen/cudnn headers), but torch's wheels bring "
                 "cuDNN's libraries without its headers, and the build looks for cuDNN only where its own variables "
                 "point (CXXFLAGS and a module's CUDNN_ROOT are not read)",
                 f"point the build at cuDNN before pip install: export CUDNN_PATH={root} CUDNN_HOME={root} "
                 f"CPATH={root}/include:$CPATH" + (" (Transformer Engine reads CUDNN_PATH, then CUDNN_HOME)" if te else "")
                 + "; without a cuDNN install, pip install nvidia-cudnn-cu12 and use its folder: CUDNN_PATH=$(python -c "
                 "'import os, nvidia.cudnn; print(os.path.dirname(nvidia.cudnn.__file__))')",
                 [ctx.line_fact(lines[0])], lines[:1])
