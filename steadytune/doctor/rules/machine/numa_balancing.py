"""The kernel's automatic NUMA balancing left on under multi-GPU work on AMD Instinct machines: AMD's MI300X system
optimization guide (rocm.docs.amd.com/en/latest/how-to/system-optimization/mi300x.html, "Disable NUMA auto-balancing")
turns it off, since the page migrations it makes slow and stall GPU transfers (RCCL's bandwidth low and varying, a job
that hangs now and then). Read from the setting the paste shows (`cat /proc/sys/kernel/numa_balancing` printing 1,
`kernel.numa_balancing = 1`) beside a complaint about speed or hangs on an AMD machine."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor, rule

_ON_SAME_LINE = re.compile(r"(?i)\bnuma_balancing\b\s*[=:]?\s*1\s*$")
_ASKED = re.compile(r"(?i)/proc/sys/kernel/numa_balancing\s*$")
_COMPLAINT = re.compile(r"(?i)\b(?:slow\w*|lower than|low (?:bandwidth|throughput)|bandwidth|varies|variance|"
                        r"unstable|performance|throughput|hangs?|stall\w*)\b")


@rule("multi-gpu-transport")
def numa_balancing_on(ctx: Context) -> Optional[Diagnosis]:
    lines = ctx.sheet.lines
    shown = _lines_matching(ctx, _ON_SAME_LINE)
    for n, line in enumerate(lines, 1):
        if _ASKED.search(line) and n < len(lines) and lines[n].strip() == "1":
            shown = shown or _lines_matching(ctx, re.escape(line.strip()))
    if not shown or _vendor(ctx) != "amd" or not _COMPLAINT.search(_text(ctx)):
        return None
    return _make("multi-gpu-transport", "automatic NUMA balancing is on",
                 "kernel.numa_balancing is 1: the kernel migrates pages between NUMA nodes while the GPUs read and "
                 "write host memory, which slows and stalls transfers (RCCL bandwidth low and varying run to run)",
                 "turn it off: sudo sh -c 'echo 0 > /proc/sys/kernel/numa_balancing' (to keep it: "
                 "kernel.numa_balancing=0 in /etc/sysctl.d/99-numa.conf; AMD's MI300X system optimization guide), then "
                 "rerun the benchmark", [], shown, confirmed=False)
