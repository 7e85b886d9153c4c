"""mmcv, the compiled base of OpenMMLab's projects (mmdet, mmseg, mmpose, mmocr, mmdet3d), read from two of its own
messages:

  - an OpenMMLab project's version assertion, "MMCV==2.2.0 is used but incompatible. Please install mmcv>=2.0.0rc4,
    <2.2.0.": the message states the range, so the fix is the newest mmcv release inside it, installed from
    OpenMMLab's wheel index for the machine's torch and CUDA (open-mmlab/mmdetection#12312: mmcv==2.1.0 under
    mmdet 3.x, whose cap excludes 2.2.0);
  - an undefined symbol in mmcv's compiled _ext: the mmcv (mmcv-full) build does not fit the torch / CUDA, or the
    release's own build was broken; the wheel of OpenMMLab's index for that torch and CUDA replaces it (the PyPI
    source build of mmcv-full 1.3.18 lacked symbols of its CPU ops, fixed in 1.4.0: open-mmlab/mmcv#1556).

Sources: mmcv's installation docs (pip install mmcv==<release> -f https://download.openmmlab.com/mmcv/dist/<cuXYZ>/
<torchX.Y>/index.html for 2.x, .../<torchX.Y.0>/index.html for mmcv-full 1.x; mim install picks it); the releases in
_RELEASES are mmcv's PyPI history (2.2.0 the last; mmcv-full's last 1.7.2)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _release_numbers, _text, \
    rule
from steadytune.doctor.rules.install.shared import _listed_torch_version


# mmcv's releases an OpenMMLab range can ask for, oldest first (the 1.x line was published as mmcv-full)
_RELEASES = ("1.3.17", "1.3.18", "1.4.0", "1.4.8", "1.5.3", "1.6.2", "1.7.0", "1.7.1", "1.7.2",
             "2.0.0", "2.0.1", "2.1.0", "2.2.0")
# an mmcv release whose published build was broken -> the release that fixed it
_BROKEN = {"1.3.18": "1.4.0"}    # open-mmlab/mmcv#1556: the maintainer, 1.3.18's PyPI build lacks symbols; 1.4.0 fixed

_RANGE = re.compile(r"(?i)MMCV==([\w.]+) is used but incompatible\.?\s*Please install mmcv\s*>=\s*([\w.]+),\s*(<=?)\s*"
                    r"([\d.]+)")
_EXT_SYMBOL = re.compile(r"(?i)(?:mmcv[/\\])?_ext\.cpython[^\s:]*\.so:?\s*undefined symbol|mmcv[/\\]_ext.{0,80}"
                         r"undefined symbol")


def _index(ctx: Context, major: int) -> str:
    """OpenMMLab's wheel index for the paste's torch and CUDA (its own folder names), or the pattern."""
    text = _text(ctx)
    torch = _listed_torch_version(ctx) or next((m.group(1) for m in [re.search(
        r"(?i)\b(?:py)?torch\s*(?:==|=|\s)\s*(\d+\.\d+)(?:\.\d+)?", text)] if m), None)
    cuda = re.search(r"(?i)\+cu(\d{3})\b|cudatoolkit\s*=+\s*(\d+)\.(\d)|\bcuda\s*(?:version)?\s*[:=]?\s*(1\d)\.(\d)\b",
                     text)
    label = None
    if cuda:
        label = "cu" + (cuda.group(1) or (cuda.group(2) + cuda.group(3) if cuda.group(2) else cuda.group(4) + cuda.group(5)))
    if torch:
        major_minor = ".".join(torch.split("+")[0].split(".")[:2])
        folder = f"torch{major_minor}.0" if major == 1 else f"torch{major_minor}"
    else:
        folder = "torch<X.Y>"
    return f"https://download.openmmlab.com/mmcv/dist/{label or 'cu<XYZ>'}/{folder}/index.html"


@rule("wheel-platform")
def openmmlab_mmcv_range(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _RANGE)
    if not lines:
        return None
    found, low, op, high = _RANGE.search(lines[0].line).groups()
    inside = [r for r in _RELEASES if _release_numbers(low) <= _release_numbers(r) and
              (_release_numbers(r) <= _release_numbers(high) if op == "<="
               else _release_numbers(r) < _release_numbers(high))]
    if not inside:
        return None
    pick = inside[-1]
    major = _release_numbers(pick)[0]
    package = "mmcv-full" if major == 1 else "mmcv"
    return _first(_make(
        "wheel-platform", f"mmcv {found} is outside the range this OpenMMLab project accepts",
        f"the project checks mmcv's version at import and accepts mmcv>={low}, {op}{high} only; {found} is outside it",
        f"install the newest mmcv inside the range, {package}=={pick}: pip uninstall -y mmcv mmcv-full; pip install "
        f"{package}=={pick} -f {_index(ctx, major)} (OpenMMLab's prebuilt wheels for the torch and CUDA; without one "
        f"for this torch, pip or mim install {package}=={pick} builds it from source, which takes a while), or mim "
        f"install \"{package}=={pick}\"; editing the assertion in the project's __init__.py only hides it",
        [ctx.line_fact(lines[0])], lines[:1]))


@rule("abi-mismatch")
def mmcv_ext_symbol(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    lines = _lines_matching(ctx, _EXT_SYMBOL)
    if not lines or not re.search(r"(?i)\bmmcv", text):
        return None
    release = re.search(r"(?i)mmcv(?:-full)?\s*(?:==|\s)\s*v?(\d+\.\d+\.\d+)", text)
    version = release.group(1) if release else None
    major = _release_numbers(version)[0] if version else 1 if re.search(r"(?i)mmcv-full", text) else 2
    package = "mmcv-full" if major == 1 else "mmcv"
    fixed = _BROKEN.get(version or "")
    pin = f"=={fixed}" if fixed else (f"=={version}" if version else "")
    note = (f" ({package} {version}'s published build lacks symbols of its own ops; {fixed} fixed it)" if fixed else "")
    return _first(_make(
        "abi-mismatch", "mmcv's compiled ops (_ext) do not load",
        "mmcv's _ext library misses a symbol: the mmcv build does not fit the installed torch and CUDA (a source build "
        "against another torch, a wheel of another index), or the release's own build was broken" + note,
        f"pip uninstall -y mmcv mmcv-full mmcv-lite; pip install {package}{pin} -f {_index(ctx, major)} (OpenMMLab's "
        f"prebuilt wheel for this torch and CUDA; mim install {package}{pin} picks the same), then python -c "
        "'import mmcv.ops' must load", [ctx.line_fact(lines[0])], lines[:1]))
