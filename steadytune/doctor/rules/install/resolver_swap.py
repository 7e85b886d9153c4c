"""A GPU build of torch replaced by the installer of another package: uv's or pip's own record shows torch+rocmX.Y
(or +cuXXX) taken out and a torch without that tag put in. The package's torch requirement (an upper cap the GPU build
is above, or a plain `torch` pin the resolver fills from PyPI) made the resolver swap it; PyPI's torch is the CUDA build
on Linux and the CPU build on Windows, so the ROCm build (or, on Windows, the CUDA one) is gone. The fix keeps the GPU build and installs the package around it."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, on_windows, rule

# uv's diff ("- torch==2.11.0+rocm7.13.0" / "+ torch==2.10.0"), pip's ("Found existing installation: torch
# 2.5.1+rocm6.2" ... "Successfully installed ... torch-2.6.0 ...")
_REMOVED = re.compile(r"(?m)^\s*-\s*torch==(\d+\.\d+(?:\.\d+)?\+(?:rocm|cu)[\w.]+)\s*$|Found existing installation: "
                      r"torch (\d+\.\d+(?:\.\d+)?\+(?:rocm|cu)[\w.]+)")
_ADDED = re.compile(r"(?m)^\s*\+\s*torch==(\d+\.\d+(?:\.\d+)?)\s*$|Successfully installed\b[^\n]*?\btorch-(\d+\.\d+"
                    r"(?:\.\d+)?)(?=\s|$)")
_INSTALLED_PACKAGE = re.compile(r"(?i)\b(?:installing|pip install|uv pip install|install)\s+[`'\"]?([A-Za-z][\w.-]+)")


@rule("torch-build")
def gpu_torch_swapped_out(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the installer's record of a torch with a GPU tag removed and one without a tag installed."""
    text = _text(ctx)
    if "torch" not in text:
        return None
    removed, added = _REMOVED.search(text), _ADDED.search(text)
    if not removed or not added:
        return None
    old = removed.group(1) or removed.group(2)
    new = added.group(1) or added.group(2)
    tag = old.split("+", 1)[1]
    kind = "ROCm" if tag.startswith("rocm") else "CUDA"
    if kind == "CUDA" and not on_windows(ctx, text):
        return None   # PyPI's Linux torch is a CUDA build itself: a swap there is another reading (its CUDA release)
    packages = [m.group(1) for m in _INSTALLED_PACKAGE.finditer(text)
                if m.group(1).lower() not in ("torch", "the", "a", "it", "pip", "uv", "step", "of")]
    package = packages[0] if packages else "the package installed after it"
    lines = _lines_matching(ctx, re.escape(new))[:1] or _lines_matching(ctx, re.escape(old))[:1]
    return _first(_make(
        "torch-build", f"installing {package} replaced the {kind} torch ({old}) with PyPI's torch {new}",
        f"{package}'s torch requirement did not admit {old} (a cap below it, or a plain torch the resolver took from "
        f"PyPI), so the installer swapped it for torch {new} from PyPI, which is not the {kind} build ({tag}): the "
        f"{kind} torch is gone and what is left fails or runs without the GPU",
        f"put the {kind} build back and keep it: pip install --force-reinstall torch=={old} from the {kind} index it "
        f"came from, then install {package} without letting it touch torch (pip install {package} --no-deps, or with "
        f"a constraints file holding torch=={old}: pip install -c constraints.txt {package}); or a {package} release "
        f"whose torch requirement admits {old.split('+', 1)[0]}", [ctx.line_fact(lines[0])] if lines else [], lines))
