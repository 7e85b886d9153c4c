"""An extension that ships one compiled module per compute capability and finds none for this GPU: tiny-cuda-nn's
torch bindings build `tinycudann_bindings._<cc>_C` for each capability listed at build time, and at import pick the
one for the GPU ("Could not find compatible tinycudann extension for compute capability 75."). The list comes from
TCNN_CUDA_ARCHITECTURES, else from the GPU torch saw while building, else (no GPU visible to the build: a container
build, a CI machine, a WSL or remote shell without the device) from the newest capability the nvcc supports
(bindings/torch/setup.py). So the module for this card was never compiled: rebuild with the card's capability named.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

_NO_MODULE = re.compile(r"(?i)Could not find (?:a )?compatible (\w+) extension for compute capability (\d{2,3})\b")

# the package's own rebuild, per extension (its setup's variable and source)
_REBUILD = {
    "tinycudann": ("TCNN_CUDA_ARCHITECTURES",
                   "pip uninstall -y tinycudann; TCNN_CUDA_ARCHITECTURES={cc} pip install --no-cache-dir "
                   "--no-build-isolation git+https://github.com/NVlabs/tiny-cuda-nn/#subdirectory=bindings/torch"),
}


@rule("arch-missing")
def extension_without_the_cards_module(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _NO_MODULE)
    if not lines:
        return None
    m = _NO_MODULE.search(lines[0].line)
    name, cc = m.group(1), m.group(2)
    variable, command = _REBUILD.get(name.lower(), ("TORCH_CUDA_ARCHITECTURES",
                                                     f"pip uninstall -y {name}; TORCH_CUDA_ARCH_LIST=\"{cc[:-1]}."
                                                     f"{cc[-1]}\" pip install --no-cache-dir --no-build-isolation "
                                                     f"<{name}'s source>"))
    return _make("arch-missing", f"{name} was not compiled for compute capability {cc}",
                 f"{name} builds one module per compute capability named at build time and loads the one for the "
                 f"GPU; none was built for {cc[:-1]}.{cc[-1]} (the build saw no GPU, or another one, and took its "
                 "default list)",
                 f"recompile {name} for this GPU, naming its capability: {command.format(cc=cc)} (with the CUDA "
                 f"toolkit of torch's CUDA on PATH; {variable} takes a list, e.g. {cc};86, for several cards)",
                 [ctx.line_fact(lines[0])], lines[:1])
