"""A program built with a CUDA toolkit the user names ("I installed the 6.5 toolkit", "CUDA 10.1", nvcc's "release
9.0") and the runtime's "CUDA driver version is insufficient for CUDA runtime version" (driver): every CUDA toolkit
needs a driver of at least a given version, so the fix is that driver (or newer), named for the toolkit in the paste,
rather than the torch-centred advice the driver family gives when no toolkit is said. Torch's own builds are left to
access/driver.py (its +cuXXX picks the wheel index to keep instead).

Sources: NVIDIA's CUDA toolkit release notes, table "CUDA Toolkit and Corresponding Driver Versions" (Linux x86_64:
7.0 >= 346.46, 7.5 >= 352.31, 8.0 GA1 >= 367.48 / GA2 >= 375.26; 9.0 and later in access/ptx_toolchain's
_LEAST_LINUX_DRIVER, the branch alone for the minors it lacks in arch/cuda_builds' _CUDA_MIN_DRIVER); CUDA 6.5, which
predates that table: the 340 branch (andyneff's gist of minimum drivers per CUDA release, "6.5 | 340.xx", and
niuzhiheng/caffe#33, where a 340.xx driver fixed CUDA 6.5 on a Tesla K10).

Checked round 19: 7.0 / 7.5 / 8.0 GA1 / 8.0 GA2 against copies of NVIDIA's release-notes table (the CUDA 11.x notes'
"CUDA Toolkit and Corresponding Driver Versions", Linux x86_64 column: 346.46, 352.31, 367.48, 375.26); CUDA 6.5's
"340.xx" against gist.github.com/andyneff/6c56cf62596ba60a91930276bda23f47. A precise 6.5 floor such as 340.29 (the
driver bundled with the 6.5 installer) was not checked against a source, so only the 340 branch is named.

Checked v20 against a copy of the CUDA 13.2 Update 2 release notes' Table 3 "CUDA Toolkit and Corresponding Driver
Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes, Linux x86_64 column): 7.0 >=346.46, 7.5 >=352.31, 8.0
>=367.48 / GA2 >=375.26, and the rows this rule reads from ptx_toolchain's _LEAST_LINUX_DRIVER (9.0-11.6, 12.6 GA
>=560.28.03, 13.0 GA >=580.65.06) and cuda_builds' _CUDA_MIN_DRIVER branches (11.8 GA >=520.61.05, 12.4 GA >=550.54.14,
12.8 GA >=570.26, 12.9 GA >=575.51.03, ...) all match. That table starts at 7.0, so CUDA 6.5 is not in it. 340.29 for
6.5 is still not checked against a source (none found in v20's look-ups; one secondary table, blog.csdn.net/
yumin1058882119/article/details/106900592, citing Rogue Wave, gives ">= 340.21", which disagrees with 340.29 as the
floor), so the rule keeps naming the 340 branch only."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.cuda_builds import _CUDA_MIN_DRIVER
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, on_windows, rule

# 7.0-8.0: the release notes' driver table (checked v20); 6.5: not checked against a source: the branch only ("6.5 |
# 340.xx" in andyneff's gist; no source found for 340.29 as the exact floor)
_OLDER_TOOLKITS = {(6, 5): "340", (7, 0): "346.46", (7, 5): "352.31", (8, 0): "367.48 (375.26 for 8.0 GA2)"}
_INSUFFICIENT = re.compile(r"(?i)CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver|"
                           r"CUDA_ERROR_INSUFFICIENT_DRIVER")
# the toolkit said: "the 6.5 toolkit", "CUDA 10.1", "CUDA toolkit 9.2", "cuda-9.0", nvcc's "release 10.0, V10.0.130"
_TOOLKIT = re.compile(r"(?i)\b(\d{1,2}\.\d)\s+(?:CUDA\s+)?toolkit\b|\bCUDA(?:[ -]toolkit)?[ -]?v?(\d{1,2}\.\d)(?![\d.])|"
                      r"\brelease (\d{1,2}\.\d), V\d")
# torch (or a framework's own wheel) in the paste: its build, not a toolkit, sets the CUDA it needs
_WHEEL = re.compile(r"(?i)\btorch\b|\+cu\d{2,3}\b|\bpytorch\b|\btensorflow\b|\bjax\b")


@rule("driver")
def toolkit_needs_driver(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the runtime's insufficient-driver message and a CUDA toolkit named, no torch build in the paste."""
    said = _lines_matching(ctx, _INSUFFICIENT)
    text = _text(ctx)
    if not said or _WHEEL.search(text) or on_windows(ctx, text):
        return None
    named = [next(g for g in m.groups() if g) for m in _TOOLKIT.finditer(text)]
    # (nvidia-smi's "CUDA Version: 11.4" is the driver's own, not the toolkit's)
    named = [v for v in named if not re.search(rf"CUDA Version:?\s*{re.escape(v)}", text)]
    if not named:
        return None
    # (lazy: importing the rule module at the top would register its rules ahead of their place in runner.py)
    from steadytune.doctor.rules.access.ptx_toolchain import _LEAST_LINUX_DRIVER
    major, minor = (int(x) for x in named[-1].split("."))
    least = _OLDER_TOOLKITS.get((major, minor)) or _LEAST_LINUX_DRIVER.get((major, minor))
    branch = _CUDA_MIN_DRIVER.get((major, minor))
    if least is None and branch is None:
        return None
    need = (f"NVIDIA driver {least} or newer" if least and "." in least else
            f"an NVIDIA driver of the {least or branch} branch or newer ({least or branch}.xx)")
    return _first(_make(
        "driver", f"the NVIDIA driver is older than CUDA {major}.{minor} needs",
        f"the program is built with the CUDA {major}.{minor} toolkit, whose runtime needs {need} (Linux); "
        "the installed driver is older, so the runtime refuses to start",
        f"install {need} for the card (its download page, or the driver bundled with the CUDA "
        f"{major}.{minor} installer), reboot, and check nvidia-smi's driver version; keep the CUDA {major}.{minor} "
        "toolkit the program was built with", [], said[:1]))
