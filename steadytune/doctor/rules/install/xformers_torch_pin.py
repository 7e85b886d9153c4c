"""pip install xformers replacing the installed torch: each xformers wheel is built for one torch
release and pins it, so the resolver swaps torch. xformers' README: the build for the installed torch comes from that
torch's own index. Split out of library_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_XF_PULLED = re.compile(r"(?i)(?:pip install|installing)\s+(?:-U\s+)?xformers\b[^\n]{0,80}\b(?:pulled|replaced|"
                        r"upgraded|downgraded|uninstalled|removed|overwr\w+|changed|installed)\b[^\n]{0,40}\btorch|"
                        r"\bxformers\s+(?:pulled|replaced|upgraded|downgraded|uninstalled|overwr\w+)\b[^\n]{0,30}\btorch")


@rule("torch-build")
def xformers_pulls_other_torch(ctx: Context) -> Optional[Diagnosis]:
    """pip install xformers replacing the installed torch: each xformers wheel is built for one torch release and pins
    it, so the resolver swaps torch; the xformers for the installed torch comes from that torch's own index."""
    said = _lines_matching(ctx, _XF_PULLED)
    if not said:
        return None
    text = _text(ctx)
    builds = re.findall(r"\btorch[ =-]{1,2}(\d+\.\d+\.\d+)\+(cu\d+|rocm[\d.]+)", text) or \
        re.findall(r"\b(\d+\.\d+\.\d+)\+(cu\d+|rocm[\d.]+)", text)
    kept = builds[-1] if builds else None
    if len(builds) >= 2:
        # the user's own torch is the one they name as theirs ("over my torch X"), else the earlier one
        mine = re.search(r"(?i)\bmy torch[ =-]{0,2}(\d+\.\d+\.\d+)\+(cu\d+|rocm[\d.]+)", text)
        kept = (mine.group(1), mine.group(2)) if mine else builds[0]
    if kept:
        version, tag = kept
        fix = (f"put the torch back and take the xformers built for it from its index: pip install torch=={version} "
               f"--index-url https://download.pytorch.org/whl/{tag}; pip install -U xformers --index-url "
               f"https://download.pytorch.org/whl/{tag} --no-deps (or pin the xformers release made for torch "
               f"{version}); python -m xformers.info then shows its kernels available")
    else:
        fix = ("install xformers from the index of the installed torch: pip install -U xformers --index-url "
               "https://download.pytorch.org/whl/<torch's cuXXX tag> (or pin the xformers release made for that torch, "
               "with --no-deps); python -m xformers.info then shows its kernels available")
    return _first(_make("torch-build", "installing xformers replaced the installed torch",
                        "every xformers wheel is built against one torch release and requires exactly it, so pip "
                        "swapped the installed torch for that one (and its CUDA)", fix, [], said[:1]))
