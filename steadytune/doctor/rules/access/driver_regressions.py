"""A new NVIDIA driver breaking a program that worked on the one before: a table of (program, the driver release from
which it breaks, the last release that runs it), read where the paste names the program, a driver release at or past
the breaking one, and the program's symptom. The fix names the release to roll back to, and the program's own way
past it where there is one.

Sources: numba#10249 (Game Ready 581.29 and 580.88 break numba.cuda.to_device with an access violation; 576.88 runs
it), numba#10166 (580.88 breaks the same target; 577.00 runs it; the maintainers point at numba-cuda), numba#10255 and
NVIDIA/numba-cuda#553 (the same access violation on other R580 drivers, Windows and WSL 2)."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from steadytune.doctor.rules.access.device_files import _WSL_SAID
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text


class DriverRegression(NamedTuple):
    program: str
    named: "re.Pattern[str]"         # the program, by its modules and messages
    first_broken: tuple[int, int]    # the first driver release (branch, build) that breaks it
    last_good: str                   # the release(s) to roll back to
    symptom: "re.Pattern[str]"       # what the program says when the driver breaks it
    windows_only: bool
    way_past: str                    # the program's own way past it, without the roll-back


_REGRESSIONS = (
    # numba's built-in CUDA target (numba.cuda, its ctypes driver binding) under the R580 (CUDA 13) Windows drivers
    DriverRegression("numba's CUDA target", re.compile(r"(?i)\bnumba\b"), (580, 88), "576.88 (or 577.00, the last "
                     "releases before branch 580)",
                     re.compile(r"(?i)access violation|list index out of range|CUDA_ERROR_\w+|crash"), True,
                     "or move to numba-cuda, where numba's CUDA target is maintained now (pip install -U numba-cuda; "
                     "conda install -c conda-forge numba-cuda), and update the driver again once that runs"),
)

# a driver release said beside the word driver, Game Ready / Studio, or nvidia-smi's header
_RELEASE = re.compile(r"(?i)(?:driver|game ?ready|studio|nvidia-smi|Driver Version:?)\D{0,40}?\b(5\d\d|6\d\d)\.(\d\d)\b")


@rule("driver")
def driver_broke_the_program(ctx: Context) -> Optional[Diagnosis]:
    """The program of a table row, failing its row's way, on a driver release from the one that breaks it on."""
    text = _text(ctx)
    said = [(int(a), int(b)) for a, b in _RELEASE.findall(text)]
    if not said:
        return None
    windows = on_windows(ctx, text) or bool(re.search(r"(?i)game ?ready|OSError: exception: access violation|"
                                                        r"\.dll\b", text) or _WSL_SAID.search(text))
    for row in _REGRESSIONS:
        broken = [r for r in said if r >= row.first_broken]
        if not broken or not row.named.search(text) or (row.windows_only and not windows):
            continue
        symptom = _lines_matching(ctx, row.symptom)
        if not symptom:
            continue
        release = "{}.{:02d}".format(*max(broken))
        first = "{}.{:02d}".format(*row.first_broken)
        return _make("driver", f"NVIDIA driver {release} breaks {row.program}",
                     f"{row.program} fails on the NVIDIA drivers from {first} on (here {release}); the same code runs on "
                     "the releases before it, whatever the toolkit or the program's version",
                     f"roll the NVIDIA driver back to {row.last_good}: NVIDIA's driver download page lists past "
                     "releases (a clean install, or DDU first), and hold it there (no automatic driver update from "
                     f"the NVIDIA app or Windows Update); {row.way_past}", [], symptom)
    return None
