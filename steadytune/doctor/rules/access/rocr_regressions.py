"""A ROCm nightly (TheRock's dated builds, X.Y.ZaYYYYMMDD) whose runtime crashes at start on some GPUs: nightlies
carry regressions that a later nightly fixes, so the fix is a nightly built after the fix (or the last one before the
regression), not a driver or an override. A table of known ones: (the runtime's frame or message, the GPUs it hits,
the first and the fixed nightly date, the fix's pull request, the last good nightly).

Sources: ROCm/rocm-systems#7071 (rocminfo segfaults in rocr::AMD::GpuAgent::InitDma on gfx1151 / gfx1150 APUs with one
SDMA engine from rocm 7.14.0a20260609: the P2P SDMA engine count is an unsigned subtraction that underflows; fixed by
rocm-systems PR 7053, merged 2026-06-12; 7.14.0a20260608 works)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _CRASH, _lines_matching, _make, rule, _text


class NightlyRegression(NamedTuple):
    what: str                       # the regression, in a few words
    frame: "re.Pattern[str]"        # the runtime's frame or message that shows it
    archs: tuple[str, ...]          # the GPUs it hits (gfx prefixes)
    first_broken: str               # the first nightly date (YYYYMMDD) with it
    fixed_after: str                # the date the fix merged: nightlies built after it have it
    pull: str                       # the fix
    last_good: str                  # the last nightly date without it


_REGRESSIONS = (
    NightlyRegression("ROCr's SDMA engine count underflows on APUs with one SDMA engine",
                      re.compile(r"GpuAgent::InitDma\b"), ("gfx1150", "gfx1151", "gfx1152"),
                      "20260609", "20260612", "rocm-systems PR 7053", "20260608"),
)

# TheRock's nightly versions: rocm-7.14.0a20260610, 7.11.0a20260114, rocm7.11.0a20260115
_NIGHTLY = re.compile(r"(?i)(?:rocm[-_ ]?)?(\d+\.\d+\.\d+)(?:a|rc|\.dev)(\d{8})\b")
_APU_NAMES = re.compile(r"(?i)Radeon 80[4-6]0S|Radeon 8[89]0M|Radeon 8[246]0M|Strix|Ryzen AI")


@rule("driver")
def rocm_nightly_regression(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    nightlies = [(m.group(1), m.group(2)) for m in _NIGHTLY.finditer(text)]
    if not nightlies:
        return None
    arch, fact = ctx.arch()
    for row in _REGRESSIONS:
        frames = _lines_matching(ctx, row.frame)
        if not frames:
            continue
        on_gpu = (arch and arch.startswith(row.archs)) or any(a in text for a in row.archs) or \
            (_APU_NAMES.search(text) and not arch)
        dated = [n for n in nightlies if n[1] >= row.first_broken]
        if not on_gpu or not dated:
            continue
        release, date = max(dated, key=lambda n: n[1])
        fixed = date > row.fixed_after
        crashed = [e for e in _lines_matching(ctx, _CRASH)][:1]
        return _make("driver", f"a regression in the ROCm {release} nightlies: {row.what}",
                     f"the ROCm nightly {release}a{date} crashes in its runtime ({row.frame.pattern.strip(chr(92) + 'b')}) on "
                     f"{arch or 'this GPU'}: {row.what}, a regression from the {row.first_broken} nightlies that "
                     f"{row.pull} fixed (merged {row.fixed_after})" + (
                         "; this build is dated after the fix, so check that the runtime that loads is the new one"
                         if fixed else ""),
                     f"install a nightly built after {row.fixed_after} (it has {row.pull}), or roll back to the "
                     f"{release}a{row.last_good} nightly, the last one that works; the driver and the kernel stay as "
                     "they are", [f for f in (fact,) if f], frames[:1] + crashed)
    return None


# a torch wheel (or an image that ships one) built on such a nightly: the version carries the ROCm nightly in its local
# tag (2.13.0a0+rocm7.14.0a20260612). A crash at start with no frame shown (torch.cuda.is_available() or HIP's
# initialisation dies with SIGSEGV / exit 139, no traceback), on a GPU the regression hits and a nightly dated inside
# its broken range, is the same regression seen from torch: the torch nightly of the last good date is the way back
# (kyuz0/amd-strix-halo-vllm-toolboxes#61: torch 2.13.0a0+rocm7.14.0a20260612 segfaulting on gfx1151 at HIP init; the
# reporter bisected it to ROCr's InitDma and pinned the 20260608 torch nightly).
_TORCH_NIGHTLY = re.compile(r"(?i)\btorch\W{0,3}(?:==)?\s*(\d+\.\d+\.\d+\w*)\+rocm(\d+\.\d+\.\d+)a(\d{8})\b")
_AT_START = re.compile(r"(?i)\bis_available\(\)|\bHIP init\w*|\bhipInit\b|\bat start\w*|\bbefore any model loads?\b|"
                       r"\bimport torch\b|\bon (?:startup|launch)\b")


@rule("torch-build")
def torch_on_a_broken_rocm_nightly(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    wheels = [(m.group(1), m.group(2), m.group(3)) for m in _TORCH_NIGHTLY.finditer(text)]
    crashed = _lines_matching(ctx, _CRASH)
    if not wheels or not crashed or not _AT_START.search(text):
        return None
    arch, fact = ctx.arch()
    for row in _REGRESSIONS:
        if _lines_matching(ctx, row.frame):
            continue   # the frame is shown: the runtime's own reading above
        on_gpu = (arch and arch.startswith(row.archs)) or any(a in text for a in row.archs)
        hit = [w for w in wheels if row.first_broken <= w[2] <= row.fixed_after]
        if not on_gpu or not hit:
            continue
        torch, release, date = hit[0]
        return _make("torch-build", f"the torch nightly {torch}+rocm{release}a{date} carries a broken ROCm runtime",
                     f"this torch is built on the ROCm {release} nightly of {date}, inside the range "
                     f"({row.first_broken} to {row.fixed_after}) whose runtime crashes at start on "
                     f"{arch or '/'.join(row.archs)}: {row.what} ({row.pull} fixed it); the crash comes before any "
                     "Python frame, so no traceback is printed",
                     f"pin the torch nightly of {row.last_good} (torch ...+rocm{release}a{row.last_good}, the last "
                     f"one before the regression) or take one built after {row.fixed_after}; in an image, rebuild it "
                     f"on that torch or use a tag from before {row.first_broken}", [f for f in (fact,) if f],
                     crashed[:1])
    return None
