"""A HIP program on Windows stopping at "entry point not found" with no function named (round 18, r18b). On Windows
HIP's runtime, amdhip64.dll, is installed by the AMD display driver (Adrenalin) into System32, so a program built
against a newer HIP (ZLUDA, hipInfo from a newer HIP SDK, a HIP build of llama.cpp) that calls a function the older
driver's amdhip64 lacks stops at load with Windows' "entry point not found" dialog. ZLUDA#144: the 22.Q4 driver's
amdhip64.dll had no hipDeviceSetLimit; the maintainer's fix was a newer Adrenalin driver (23.12.1 or later), and
24.1.1 fixed it for the reporter. The named-function form ("The procedure entry point hipX could not be located")
is read by access/driver.py; this reads the bare dialog title beside a HIP program."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule

_ENTRY = re.compile(r"(?i)\bentry point (?:was )?not found|\bentry point could not be (?:located|found)|"
                    r"找不到.{0,6}入口点|无法定位程序输入点")
_HIP_PROGRAM = re.compile(r"(?i)\bhipinfo\b|\bzluda\b|amdhip64|\bHIP SDK\b|\bhip\w*\.dll\b|\brocblas\.dll\b")


@rule("driver")
def hip_entry_point_missing(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    entry = _lines_matching(ctx, _ENTRY)
    if not entry or not _HIP_PROGRAM.search(text) or not on_windows(ctx, text):
        return None
    if re.search(r"(?i)entry point \w*hip\w+|hip\w+ entry point", text):
        return None   # a named HIP function: access/driver.py's reading
    # another function named, in a library other than the driver's amdhip64 (a rocBLAS / hipBLAS copied in beside the
    # program): that library's release, not the driver, is another reading
    named = re.search(r"(?i)procedure entry point \w+|entry point \w+ could not", text)
    if named and not re.search(r"(?i)amdhip64", text):
        return None
    return _make("driver", "the AMD driver's HIP runtime (amdhip64.dll) is older than the program",
                 "on Windows HIP's runtime, amdhip64.dll in System32, comes with the AMD display driver; the program "
                 "(ZLUDA, hipInfo, a HIP build) calls a HIP function the installed driver's amdhip64 does not have, so "
                 "Windows stops it at load with 'entry point not found'",
                 "update the AMD driver: AMD Software: Adrenalin Edition, a current release (for ZLUDA, 23.12.1 or "
                 "newer), clean install (DDU if an old one lingers), reboot; then check that "
                 "C:\\Windows\\System32\\amdhip64*.dll carries the new driver's date and rerun the program", [], entry)
