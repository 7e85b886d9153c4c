"""RCCL problems a ROCm release lists as known issues, with the release that resolved them: a table row per issue
(the hardware and symptom it names, the releases), read where a paste says that symptom on that hardware. A ROCm
release said in the paste at or past the resolving one keeps the row out.

Facts: ROCm 7.1.1 release notes, "Known issues" (RCCL performance degradation on AMD Instinct MI300X GPUs with the
AMD Pollara AI NIC for Scatter, AllToAll and AllToAllv at some message sizes), resolved in ROCm 7.2.0 (AMD's
tracking issue for that known issue, closed with 7.2.0, where RCCL's develop branch is the interim).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


class KnownIssue(NamedTuple):
    hardware: str        # a pattern: the GPUs and parts the issue names
    symptom: str         # a pattern: what the user sees
    affected: str        # the ROCm release whose notes list it
    fixed: tuple[int, int]   # the ROCm release that resolved it
    what: str            # the issue, as the notes give it
    meanwhile: str       # what to do until the upgrade


KNOWN_ISSUES = (
    KnownIssue(r"(?i)\bMI300X?\b[^\n]{0,80}\bPollara\b|\bPollara\b[^\n]{0,80}\bMI300X?\b",
               r"(?i)\b(?:performance|bandwidth|throughput)\b[^\n]{0,30}\b(?:degrad\w*|drop\w*|regress\w*|lower|"
               r"slow\w*)|\b(?:slow\w*|degrad\w*)\b[^\n]{0,40}\b(?:Scatter|AllToAllv?|all_to_all)\b",
               "7.1.1", (7, 2),
               "the RCCL of ROCm 7.1.1 loses bandwidth on MI300X with the Pollara AI NIC for Scatter, AllToAll and "
               "AllToAllv at some message sizes (a known issue of that release)",
               "until then build RCCL from its develop branch and put it first on LD_LIBRARY_PATH"),
)

_ROCM = re.compile(r"(?i)\bROCm[ -]?v?(\d+)\.(\d+)")


@rule("multi-gpu-transport")
def rccl_known_issue(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a row's hardware and symptom said, and no ROCm release said at or past the one that resolved it."""
    text = _text(ctx)
    if not re.search(r"(?i)\bRCCL\b", text):
        return None
    said = [(int(a), int(b)) for a, b in _ROCM.findall(text)]
    for issue in KNOWN_ISSUES:
        if not (re.search(issue.hardware, text) and re.search(issue.symptom, text)):
            continue
        if said and max(said) >= issue.fixed:
            continue
        fixed = ".".join(map(str, issue.fixed))
        return _make("multi-gpu-transport", f"a known RCCL issue of ROCm {issue.affected}, resolved in ROCm {fixed}",
                     issue.what, f"upgrade to ROCm {fixed} or newer (its RCCL resolves it; torch wheels for ROCm "
                     f"{fixed} bring their own RCCL, rccl-tests rebuilt against it confirm the bandwidth); "
                     + issue.meanwhile, [], _lines_matching(ctx, issue.symptom)[:1], confirmed=False)
    return None
