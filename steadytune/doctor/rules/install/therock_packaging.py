"""TheRock's ROCm Python nightlies (rocm[libraries,devel]==X.Y.ZaYYYYMMDD from rocm.nightlies.amd.com) whose packaging
broke a tool for a few days: the wheels install, and a console script they declare fails. Nightlies carry such
regressions until a later nightly fixes them, so the fix is a nightly built after the fix (or the last one before the
break). A table of known ones: (the tool, what shows it, the first and last broken nightly dates, the change that broke
it, the fix).

Sources: ROCm/TheRock#2954 (the amd-smi console script exits 1 in `rocm-sdk test` on the 7.11.0a20260112 nightlies:
TheRock PR 2188, merged 2026-01-10, moved amdsmi from the base/ artifact to core/ without updating the wheel's
console-script entry points; reverted on 2026-01-13 in commit dbad34bf; checked v18b against the issue's timeline)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


class PackagingBreak(NamedTuple):
    tool: str
    sign: "re.Pattern[str]"     # the tool failing, as the paste shows it
    first_broken: str           # YYYYMMDD: the first nightly that can carry the change (merged that day)
    last_broken: str            # YYYYMMDD: the fix landed the next day
    cause: str
    fix: str


_BREAKS = (
    PackagingBreak("amd-smi", re.compile(r"(?i)\bamd-smi\b.{0,120}(?:non-zero exit|exit (?:status|code) [1-9]|fail|error|"
                                         r"not found|No module named)|console[- ]script amd-smi|"
                                         r"(?:fail|error)\w*\W.{0,60}\bamd-smi\b"),
                   "20260110", "20260112",
                   "TheRock PR #2188 (merged 2026-01-10) moved amdsmi from the base/ artifact to core/ without updating "
                   "the Python wheel's console-script entry points, so the nightlies built from it ship a broken "
                   "amd-smi",
                   "TheRock PR #2188's move was reverted on 2026-01-13 (commit dbad34bf): install a nightly built after it, e.g. "
                   "pip install --pre -U -i <the same rocm.nightlies.amd.com/v2/<family>/ index> \"rocm[libraries,devel]\""),
)
# TheRock's Python package versions: rocm==7.11.0a20260112, rocm[libraries,devel]==7.11.0a20260112, rocm-sdk-core 7.11.0a...
_NIGHTLY = re.compile(r"(?i)\brocm(?:[-_]sdk[-_]\w+)?(?:\[[\w,\s]+\])?\s*(?:==|\s)\s*(\d+\.\d+\.\d+)a(\d{8})\b")


@rule("rocm-libs-missing")
def therock_nightly_packaging_break(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a TheRock nightly in a row's broken dates, and that tool failing."""
    text = _text(ctx)
    nightlies = [(m.group(1), m.group(2)) for m in _NIGHTLY.finditer(text)]
    if not nightlies:
        return None
    for row in _BREAKS:
        hit = [(v, d) for v, d in nightlies if row.first_broken <= d <= row.last_broken]
        lines = _lines_matching(ctx, row.sign)
        if not hit or not lines:
            continue
        version, date = hit[-1]
        return _make("rocm-libs-missing", f"the {version}a{date} ROCm nightlies ship a broken {row.tool}",
                     f"{row.tool} fails in the nightly {version}a{date} because of a packaging regression: {row.cause}; "
                     "the machine and the install steps are not the problem",
                     row.fix, [], lines[:1])
    return None
