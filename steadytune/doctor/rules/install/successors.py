"""A package (or a build of it) that is no longer published, asked for by its old name: the package that carries it
now. pip says only that it finds no version, or the user asks for a build for their Python; the cause is that the
name is a dead end, and the fix is the successor's install, not another Python or index."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


@dataclass(frozen=True)
class Successor:
    old: re.Pattern       # the dead name as people write it (in a pip line or in prose)
    name: str             # how the cause names it
    cause: str
    fix: str
    source: str           # where the facts come from


SUCCESSORS = (
    Successor(re.compile(r"(?i)(?<![\w-])pytorch[-_]directml\b"), "pytorch-directml",
              "pytorch-directml is Microsoft's first DirectML torch (a torch 1.8 fork), discontinued: its wheels are for "
              "Python 3.8 and older only, and no new ones are made",
              "install its successor, the torch-directml plug-in, in a Python 3.10 environment (its wheels cover "
              "3.8-3.10, later releases newer Pythons): uv venv -p 3.10 (or conda create -n dml python=3.10), then pip "
              "uninstall -y pytorch-directml; pip install torch-directml (it runs beside the stock torch; device = "
              "torch_directml.device()); only to keep the old fork: a Python 3.8 environment",
              "learn.microsoft.com 'Enable PyTorch with DirectML on Windows' (torch-directml replaces pytorch-directml)"),
    # jaxlib 0.4.29+cuda12.cudnn91 -f .../jax_cuda_releases.html: the CUDA build of jaxlib by local version label
    Successor(re.compile(r"(?i)\bjaxlib\s*==\s*[\d.]+\+cuda\d+"), "jaxlib's +cuda builds",
              "current JAX publishes no jaxlib+cudaXX.cudnnYY wheels: CUDA support comes as separate plugin wheels "
              "(jax-cuda12-plugin, jax-cuda12-pjrt) beside the plain jaxlib, so a pinned jaxlib+cuda build is found "
              "only for old releases",
              "pip uninstall -y jax jaxlib; pip install -U \"jax[cuda12]\" (the extra pulls the matching jaxlib and the "
              "CUDA 12 plugin with its NVIDIA libraries; Linux or WSL 2); drop the -f jax_cuda_releases.html link",
              "docs.jax.dev installation (NVIDIA GPU: pip install -U \"jax[cuda12]\")"),
    # a tensorflow-gpu pin pip cannot find (a new Python) or the retired name's own refusal to install
    Successor(re.compile(r"(?i)(?:requirement|distribution found for|install)\s+tensorflow-gpu\b|tensorflow-gpu\S* "
                         r"has been removed"), "tensorflow-gpu",
              "tensorflow-gpu is a retired name: the tensorflow package itself carries the GPU build, and no "
              "tensorflow-gpu is made for current Pythons",
              "pip uninstall -y tensorflow-gpu; pip install \"tensorflow[and-cuda]\" (Linux or WSL 2; native Windows "
              "GPU support ended at 2.10)",
              "tensorflow.org/install/pip; the tensorflow-gpu PyPI page (package removed, use tensorflow)"),
)


# pip finding nothing, or the user saying it will not install or asking for a build
_ASKED = re.compile(r"(?i)could not find a version|no matching distribution|can'?t install|cannot install|unable to "
                    r"install|not (?:able to )?install|fails? to install|publish|compile .{0,40}for python|for python "
                    r"3\.\d+|where can i (?:get|find|download)|is there an?\b")


@rule("wheel-platform")
def discontinued_package(ctx: Context) -> Optional[Diagnosis]:
    """A discontinued package (or build) asked for by its old name: the successor's install."""
    text = _text(ctx)
    if not _ASKED.search(text):
        return None
    for successor in SUCCESSORS:
        lines = _lines_matching(ctx, successor.old)
        if lines:
            return _first(_make("wheel-platform", f"{successor.name} is no longer published", successor.cause,
                                successor.fix, [ctx.line_fact(lines[0])], lines[:1]))
    return None
