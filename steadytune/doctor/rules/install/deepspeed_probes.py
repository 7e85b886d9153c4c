"""DeepSpeed's op builder probing the libraries of its Linux-only ops: async_io needs libaio, the GPUDirect Storage op
(gds) needs NVIDIA's cuFile. At import, and when DeepSpeed is installed, it compiles a tiny test.c against each; where
the library is missing the linker's error is printed (MSVC's LNK1181 "cannot open input file 'aio.lib'", ld's
"cannot find -laio"). On Windows neither op exists (on Linux libaio's development package is simply not installed,
which install/libraries_missing.py reads).
The flags that leave the ops out of a build (DS_BUILD_AIO, DS_BUILD_GDS) are DeepSpeed's own, and its Windows build
script sets both to 0."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule


# the linker refusing the probe's library: MSVC ("cannot open input file 'aio.lib'") or GNU ld ("cannot find -laio")
_PROBE = re.compile(r"(?i)cannot open input file '?(aio|cufile)\.lib|cannot find -l(aio|cufile)\b")


@rule("wheel-platform")
def deepspeed_linux_only_op_probes(ctx: Context) -> Optional[Diagnosis]:
    """The linker missing libaio / cuFile in DeepSpeed's op probes on Windows, where the ops do not exist: build with
    DS_BUILD_AIO=0 DS_BUILD_GDS=0."""
    if "aio" not in _text(ctx).lower() and "cufile" not in _text(ctx).lower():
        return None
    lines = _lines_matching(ctx, _PROBE)
    if not lines:
        return None
    libraries = {(m.group(1) or m.group(2)).lower() for line in lines for m in _PROBE.finditer(line.line)}
    if not (on_windows(ctx, _text(ctx)) or any(".lib" in line.line.lower() for line in lines)):
        return None   # on Linux the library's development package is missing: libraries_missing reads ld's words
    named = " and ".join(sorted(libraries))
    return _make("wheel-platform", "DeepSpeed probes its Linux-only ops on Windows",
                 f"DeepSpeed's op builder compiles a test program against {named} to see whether its async_io "
                 "(libaio) and GPUDirect Storage (cuFile) ops can be built; neither library exists on Windows, so "
                 "the linker fails (a probe, printed whenever deepspeed is imported or installed)",
                 "leave the Linux-only ops out: set DS_BUILD_AIO=0 and DS_BUILD_GDS=0 before installing or "
                 "building DeepSpeed (cmd: set DS_BUILD_AIO=0 & set DS_BUILD_GDS=0; PowerShell: $env:DS_BUILD_AIO=0;"
                 " $env:DS_BUILD_GDS=0), as DeepSpeed's build_win.bat does; where the program does not use "
                 "DeepSpeed (libraries import it only because it is installed), pip uninstall -y deepspeed removes the probes",
                 [ctx.line_fact(lines[0])], lines)
