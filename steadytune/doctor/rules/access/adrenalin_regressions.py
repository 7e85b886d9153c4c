"""A new AMD Windows driver (AMD Software: Adrenalin Edition) breaking programs that ran on the release before: a table
of (the programs, the first Adrenalin release that breaks them, the last one that runs them, their symptom, their own
way past it), read where the paste names an Adrenalin release at or past the breaking one, a program of the row and
its symptom. The fix is the roll-back to the last good release (AMD's previous drivers page, after a clean removal
with AMD's Cleanup Utility or DDU), and the program's own way past it where one is known.

Source: ggml-org/llama.cpp#23508 (llama-server, LM Studio, Jan: a silent crash at start on an RX 9070 XT from
Adrenalin 26.5.1; the reporter and a second user with an RX 7900 XTX rolled back to 26.3.1 and it ran; on the Vulkan
build GGML_VK_DISABLE_COOPMAT=1 was also reported to avoid it, an environment variable ggml's Vulkan backend reads)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text


class AdrenalinRegression(NamedTuple):
    programs: str
    named: "re.Pattern[str]"
    first_broken: tuple[int, int, int]
    last_good: str
    symptom: "re.Pattern[str]"
    way_past: str


_REGRESSIONS = (
    AdrenalinRegression(
        "llama.cpp and the apps built on it",
        re.compile(r"(?i)\bllama[.-]?cpp\b|\bllama-(?:server|cli|bench)\b|\bLM ?Studio\b|\bJan(?: AI)?\b|\bkoboldcpp\b|"
                   r"\bggml\b"),
        (26, 5, 1), "26.3.1",
        re.compile(r"(?i)\bcrash\w*|\bsilently (?:exits?|dies|closes)|\bexits? (?:immediately|silently|on start)|"
                   r"\bnone of them work|0xc0000\w+|\bstopped working\b"),
        "on a Vulkan build, starting it with GGML_VK_DISABLE_COOPMAT=1 was also reported to avoid the crash"),
)

# an Adrenalin release beside its name or AMD's driver words: "Adrenalin 26.5.1", "AMD Software 26.5.2", "driver 26.5.1"
_RELEASE = re.compile(r"(?i)(?:Adrenalin\w*(?: Edition)?|AMD Software|AMD (?:GPU |graphics |display )?drivers?|"
                      r"Radeon (?:Software|drivers?))\D{0,20}?\b(2\d)\.(\d{1,2})\.(\d)\b")


@rule("driver")
def adrenalin_broke_the_program(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Windows, an Adrenalin release at or past a row's breaking one, the row's program and symptom."""
    text = _text(ctx)
    said = [tuple(int(g) for g in m.groups()) for m in _RELEASE.finditer(text)]
    if not said or not on_windows(ctx, text):
        return None
    for row in _REGRESSIONS:
        broken = [r for r in said if r >= row.first_broken]
        symptom = _lines_matching(ctx, row.symptom)
        if not broken or not row.named.search(text) or not symptom:
            continue
        release = ".".join(map(str, max(broken)))
        first = ".".join(map(str, row.first_broken))
        return _make("driver", f"Adrenalin {release} breaks {row.programs}",
                     f"{row.programs} crash on the AMD Windows drivers from Adrenalin {first} on (a driver "
                     f"regression: the same programs run on the releases before it)",
                     f"roll the driver back to Adrenalin {row.last_good}: remove the current one (AMD Cleanup Utility "
                     f"or DDU), install {row.last_good} from AMD's previous drivers page, and keep Windows Update from "
                     f"replacing it; {row.way_past}; update again once a later Adrenalin fixes it",
                     [], symptom[:1])
    return None
