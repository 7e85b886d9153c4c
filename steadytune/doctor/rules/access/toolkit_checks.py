"""An installer's own check refusing the CUDA toolkit because the driver is older than it (round 18, r18b):
"CUDA Toolkit 13.3 is installed but INCOMPATIBLE" (Unsloth Studio's Windows setup, studio/setup.ps1), and the like.
The check compares the toolkit's CUDA with the newest CUDA the NVIDIA driver runs (nvidia-smi's "CUDA Version"); the
fix is a driver for that CUDA, or the older toolkit the installer offers. The driver branch of each CUDA is
access/driver.py's table (NVIDIA's release notes); past it (CUDA 13.1 and later) only what a thread showed is named:
unsloth#5917's reporter ran CUDA 13.3 after moving the driver from 581 to 610; NVIDIA's CUDA 13.3 release notes
("CUDA Toolkit and Corresponding Driver Versions") list >=610.43.02 for 13.3 GA and Update 1, so 610 is the published
branch too (checked v18b in public copies of that table)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.access.driver import _DRIVER_FOR_CUDA
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

_REFUSED = re.compile(r"(?i)CUDA(?: Toolkit)? (\d+)\.(\d+)\S* is installed but (?:is )?(?:INCOMPATIBLE|not compatible|"
                      r"unsupported)|CUDA(?: Toolkit)? (\d+)\.(\d+)\S* (?:is )?(?:newer than|too new for) (?:what )?"
                      r"(?:the|your) (?:NVIDIA )?driver")
# a driver branch seen running a CUDA newer than the release-notes table in this module's sources
_SEEN_RUNNING = {(13, 3): 610}


@rule("driver")
def toolkit_newer_than_driver_check(ctx: Context) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _REFUSED)
    if not said:
        return None
    groups = [g for g in _REFUSED.search(said[0].line).groups() if g]
    cuda = (int(groups[0]), int(groups[1]))
    table = dict(_DRIVER_FOR_CUDA)
    where = (f"{table[cuda]} or newer" if cuda in table else
             f"a current branch ({_SEEN_RUNNING[cuda]} ran CUDA {cuda[0]}.{cuda[1]} for another user)"
             if cuda in _SEEN_RUNNING else "the current branch")
    return _make("driver", f"the NVIDIA driver is older than CUDA {cuda[0]}.{cuda[1]}",
                 f"the installer checks the CUDA {cuda[0]}.{cuda[1]} toolkit against the driver, and the driver runs an "
                 "older CUDA (nvidia-smi's 'CUDA Version' is below it), so the toolkit is refused",
                 f"update the NVIDIA driver to {where} (Windows: the current Game Ready / Studio driver; Linux: sudo "
                 "apt install nvidia-driver-<branch>, reboot) until nvidia-smi's 'CUDA Version' reads "
                 f"{cuda[0]}.{cuda[1]} or higher, then rerun the installer; or keep the driver and let the installer "
                 "fetch the older toolkit it offers", [], said)
