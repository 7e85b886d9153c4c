"""A Windows program that cannot start because the Microsoft Visual C++ runtime DLLs are missing: VCRUNTIME140.dll,
VCRUNTIME140_1.dll, MSVCP140.dll named as not found, or a child process ending with STATUS_DLL_NOT_FOUND (0xc0000135,
3221225781). The runtime comes with Microsoft's Visual C++ Redistributable; some programs bundle (or statically link)
it from a release on, and for them the fix is that release.

Sources: ollama/ollama#6804 (0.3.10 and 0.3.11 runners asking for VCRUNTIME140.dll / MSVCP140.dll, "the fix is in
0.3.12"; MSVCP140.dll again in 0.3.14, gone in 0.4.0); ollama's v0.11.3 release notes ("Statically link C++
libraries on windows"); Microsoft's Visual C++ Redistributable downloads (aka.ms/vs/17/release/vc_redist.x64.exe)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text

_DLLS = re.compile(r"(?i)\b(?:VCRUNTIME140(?:_1)?|MSVCP140(?:_\w+)?)\.dll\b")
_NOT_FOUND = re.compile(r"(?i)not (?:be )?found|could not find|cannot find|can'?t find|missing|was not found|找不到|"
                        r"无法找到|is required")
_DLL_NOT_FOUND_STATUS = re.compile(r"(?i)\b0xc0000135\b|\b3221225781\b")

# programs that bundle the runtime from a release on: (name, how it is named, the release, what to say)
_BUNDLED_FROM = (
    ("ollama", re.compile(r"(?i)\bollama\b"), (0, 3, 12),
     "update Ollama to 0.3.12 or newer (its runners bundle the runtime from 0.3.12; where MSVCP140.dll is still "
     "asked for, 0.4.0 or newer)"),
)
_VERSION = re.compile(r"(?i)\b(?:ollama\s*(?:version)?\s*(?:is\s*)?v?|version\s+)(\d+)\.(\d+)\.(\d+)\b")


@rule("rocm-libs-missing")
def visual_cpp_runtime_missing(ctx: Context) -> Optional[Diagnosis]:
    text = _text(ctx)
    named = [e for e in _lines_matching(ctx, _DLLS) if _NOT_FOUND.search(e.line) or _DLL_NOT_FOUND_STATUS.search(text)]
    status = _lines_matching(ctx, _DLL_NOT_FOUND_STATUS)
    if not named and not (status and on_windows(ctx, text)):
        return None
    redist = ("install Microsoft's Visual C++ Redistributable (x64, 2015-2022: "
              "https://aka.ms/vs/17/release/vc_redist.x64.exe), then start the program again")
    program = None
    for name, pattern, first, advice in _BUNDLED_FROM:
        if not pattern.search(text):
            continue
        versions = [tuple(int(x) for x in m.groups()) for m in _VERSION.finditer(text)]
        if not versions or min(versions) < first:
            program = advice
        break
    fix = f"{program}; or {redist}" if program else redist
    if named:
        return _make("rocm-libs-missing", "the Visual C++ runtime DLLs are missing",
                     "the program's binaries link the Microsoft Visual C++ runtime (VCRUNTIME140.dll, MSVCP140.dll), "
                     "which is not installed on this Windows and which this release of the program does not bring",
                     fix, [], (named + status)[:2])
    # only the status: a DLL the child process needs was not found (the runtime most often; a GPU library otherwise)
    return _make("rocm-libs-missing", "a DLL the program needs was not found (0xc0000135)",
                 "0xc0000135 is Windows' STATUS_DLL_NOT_FOUND: a DLL the process links was not found when it started, "
                 "most often the Visual C++ runtime (VCRUNTIME140.dll, MSVCP140.dll)",
                 fix + " (where it still fails, a dependency viewer such as Dependencies shows which DLL is missing)",
                 [], status[:1], confirmed=False)
