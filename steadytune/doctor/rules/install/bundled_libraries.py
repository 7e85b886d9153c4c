"""A library a wheel bundles, shadowed by another copy: torch's CUDA wheels carry their own cuDNN (in the wheel, or as
the nvidia-cudnn-cu* package) and find it through the RUNPATH of their libraries, which LD_LIBRARY_PATH overrides; a
cuDNN folder of a system install on LD_LIBRARY_PATH is then loaded in its place, and torch reports the version it was
compiled against beside the one it got (pytorch/pytorch issue 80637: the 1.12 wheels)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

# torch's own check (torch/backends/cudnn/__init__.py): "cuDNN version incompatibility: PyTorch was compiled against
# (8, 3, 2) but linked against (8, 0, 3)"
_COMPILED_LINKED = re.compile(r"(?i)(cuDNN|cuBLAS|NCCL) version incompatibility: \w+ was compiled\s+against "
                              r"\(([\d, ]{1,20})\) but linked against \(([\d, ]{1,20})\)")


def _version(numbers: str) -> str:
    return ".".join(n.strip() for n in numbers.split(",") if n.strip())


@rule("wheel-platform")
def bundled_library_shadowed(ctx: Context) -> Optional[Diagnosis]:
    """torch compiled against one cuDNN and linked (at run time) against another: the copy the loader found first is
    not the one the wheel brings; the folders on LD_LIBRARY_PATH come first."""
    if "linked against" not in _text(ctx):
        return None
    lines = _lines_matching(ctx, _COMPILED_LINKED.pattern)
    if not lines:
        return None
    found = _COMPILED_LINKED.search(lines[0].line)
    library, built, loaded = found.group(1), _version(found.group(2)), _version(found.group(3))
    path = re.search(r"(?m)LD_LIBRARY_PATH[=:]?\s*\n?\s*(/\S{1,200})", _text(ctx))
    folders = [p for p in (path.group(1).split(":") if path else []) if re.search(r"(?i)cudnn|cuda", p)]
    named = f" ({folders[0]})" if folders else ""
    return _make("wheel-platform", f"another {library} is loaded instead of the wheel's",
                 f"torch was built with {library} {built} and brings it, but {library} {loaded} was loaded: a folder on "
                 f"LD_LIBRARY_PATH{named} holds another {library}, and LD_LIBRARY_PATH comes before the RUNPATH the "
                 "wheel's libraries use to find their own copy",
                 f"take the {library} folder off LD_LIBRARY_PATH (export LD_LIBRARY_PATH without it, in the job script "
                 "or ~/.bashrc and any module load that adds it), then python -c \"import torch; "
                 f"print(torch.backends.cudnn.version())\" then shows {library} {built} (as one number); or pip install -U torch "
                 "(later wheels prefer their own copy)", [ctx.line_fact(lines[0])], lines[:1])
