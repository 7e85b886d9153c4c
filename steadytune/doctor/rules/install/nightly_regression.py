"""A torch nightly in which something that worked before stopped working: nightlies carry regressions that the
next nightlies fix, so the fix is another nightly (newer, or the last one that worked), not the workaround the
paste says it already tried."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

_NIGHTLY = re.compile(r"\b(\d+\.\d+\.\d+)\.dev(\d{8})(?:\+(cu\d{3}|rocm\d+\.\d+(?:\.\d+)?|cpu|xpu))?")
_WORKED_BEFORE = (r"(?i)\b(?:had been|has been|was|were) working\b|\bused to work\b|\bpreviously (?:working|worked)\b|"
                  r"\bworked (?:fine |well )?(?:before|until|with)\b|\bno longer (?:works?|functioning)\b|"
                  r"\bstopped working\b|\bnot functioning\b|\bnow (?:crash|fail)\w*")


@rule("torch-build")
def nightly_regression(ctx: Context) -> Optional[Diagnosis]:
    nightly = [m for line in ctx.sheet.lines for m in [_NIGHTLY.search(line)] if m]
    worked = _lines_matching(ctx, _WORKED_BEFORE)[:1]
    if not nightly or not worked:
        return None
    newest = max(nightly, key=lambda m: m.group(2))
    label = newest.group(3)
    index = f"https://download.pytorch.org/whl/nightly/{label}" if label else \
        "https://download.pytorch.org/whl/nightly/<the build's cuXXX / rocmX.Y>"
    said = f"{newest.group(1)}.dev{newest.group(2)}" + (f"+{label}" if label else "")
    return _make("torch-build", f"a regression in the torch nightly {said}",
                 f"torch {said} is a nightly build; the paste says the same setup worked before it, so the change is "
                 "in the nightly (nightlies carry regressions that later nightlies fix), not in the GPU or its "
                 "libraries", f"install a newer nightly: pip install --pre -U torch torchvision torchaudio "
                 f"--index-url {index} (nightlies after {newest.group(2)}), or go back to the last nightly or the "
                 "stable release that worked (pip install torch==<that version> from its index)",
                 [], worked + ctx.errors[:2])
