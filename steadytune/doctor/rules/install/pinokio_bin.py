"""Pinokio's requirement check looping: an app's install asks for CUDA (or conda, git, ffmpeg, ...), Pinokio installs
it, and the check says again that it is not installed. Pinokio installs these into its own home's bin folder
(pinokio\\bin: miniconda, its CUDA and build tools), and a stale or half-installed bin folder fails the check whatever
is installed on the system. The fix the users confirmed on Windows and Linux (pinokiocomputer/pinokio#57, #162, #99:
"delete the folder .\\pinokio\\bin ... it will not delete or harm your installed apps, they are in .\\pinokio\\api";
update to the latest Pinokio first) is to delete bin and install the app again, so Pinokio downloads its tools
afresh."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text

_PINOKIO = re.compile(r"(?i)\bpinokio\b")
# a requirement said missing by the installer, or the install going round
_NOT_INSTALLED = re.compile(r"(?i)\b(?:cuda|conda|miniconda|git|ffmpeg|zip|node|visual studio|build ?tools|registry|"
                            r"cudnn)\b.{0,30}\b(?:is|are) not installed|not installed.{0,20}\b(?:cuda|conda|git|ffmpeg)\b|"
                            r"\binstall(?:ation)? required\b|\b(?:loop|again and again|keeps? (?:asking|saying))\b")
_HOME = re.compile(r"(?i)([A-Z]:\\[^\s'\"]*?pinokio)\\(?:bin|api)\b|(/[^\s'\"]*?pinokio)/(?:bin|api)\b")


@rule("rocm-libs-missing")
def pinokio_requirements_loop(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Pinokio named, with a requirement it says is not installed (or its install loop)."""
    text = _text(ctx)
    said = _lines_matching(ctx, _NOT_INSTALLED)
    if not said or not (_PINOKIO.search(text) or ctx.tool() == "pinokio"):
        return None
    home = _HOME.search(text)
    where = (home.group(1) or home.group(2)) if home else None
    folder = (f"{where}\\bin" if where and "\\" in where else f"{where}/bin") if where else \
        "the bin folder in Pinokio's home (pinokio\\bin)"
    return _make("rocm-libs-missing", "Pinokio's own tool folder fails its requirement check",
                 "Pinokio installs CUDA, conda and its other requirements into its own home (the bin folder), not "
                 "the system's; a stale or half-installed bin folder fails the check after every install, so the "
                 "installer loops",
                 f"update Pinokio to its latest release, close it, delete {folder} (the apps stay: they live in "
                 "pinokio\\api), start Pinokio and install the app again so it downloads its tools afresh",
                 [], said[:1], confirmed=False)
