"""torchvision or torchaudio left from another torch: each release of them is built for one torch release and pins it
(torchvision 0.12 requires torch==1.11.0). When another package's install moves torch on, pip's resolver says so ("...
requires torch==1.11.0, but you have torch 2.1.0 which is incompatible"); moving torch back breaks the packages that
needed the newer one, so the companion is what follows torch, from the same index.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text


# pip's own conflict line: "torchvision 0.12.0+cu113 requires torch==1.11.0, but you have torch 2.1.0 which is
# incompatible."
_CONFLICT = re.compile(r"(?i)\b(torchvision|torchaudio) (\d+\.\d+\.\d+)(\+\w+)? requires torch==(\d+\.\d+\.\d+), but "
                       r"you have torch (\d+)\.(\d+)\.(\d+)(\+\w+)?")


def _companions_of(major: int, minor: int) -> Optional[tuple[str, str]]:
    """The torchvision and torchaudio releases built for torch major.minor (pytorch/vision's README table: torchvision
    0.N goes with torch 2.(N-15) and with torch 1.(N-1); torchaudio 2.N with torch 2.N, 0.N with torch 1.N)."""
    if major == 2:
        return f"0.{minor + 15}", f"2.{minor}"
    if major == 1 and minor >= 5:
        return f"0.{minor + 1}", f"0.{minor}"
    return None


@rule("wheel-platform")
def companion_pinned_to_another_torch(ctx: Context) -> Optional[Diagnosis]:
    if "requires torch==" not in _text(ctx):
        return None
    lines = _lines_matching(ctx, _CONFLICT)
    if not lines:
        return None
    m = _CONFLICT.search(lines[0].line)
    companion, had, label, pinned = m.group(1).lower(), m.group(2), m.group(3) or "", m.group(4)
    major, minor, patch, build = int(m.group(5)), int(m.group(6)), m.group(7), m.group(8) or ""
    pair = _companions_of(major, minor)
    if pair is None:
        return None
    vision, audio = pair
    torch = f"{major}.{minor}.{patch}"
    return _make("wheel-platform", f"{companion} {had} is built for torch {pinned}",
                 f"{companion} {had}{label} was built for torch {pinned} and pins it; torch is now {torch}{build} "
                 f"(another package's install moved it), so {companion} is left from the old torch, and moving torch "
                 "back breaks the packages that need the newer one",
                 f"install torch with its own companions from one index: pip install torch=={torch} "
                 f"torchvision=={vision}.* torchaudio=={audio}.* (torchvision {vision} and torchaudio {audio} are the "
                 f"releases built for torch {major}.{minor}), with pytorch.org's --index-url for your CUDA (its "
                 "install selector); then pip check must show no conflict", [ctx.line_fact(lines[0])], lines[:1])
