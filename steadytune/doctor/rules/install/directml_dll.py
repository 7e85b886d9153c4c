"""An onnxruntime DirectML build (onnxruntime-directml, an app's bundled onnxruntime.dll) loading Windows' own
System32\\DirectML.dll, an old 1.0-era copy, because the program does not ship the DirectML redistributable beside it:
onnxruntime's DirectML provider fails to initialise on it (a DLL init failure, a crash at session creation). DirectML's
redistributable is Microsoft's NuGet package Microsoft.AI.DirectML (the newest, 1.15.4, on nuget.org); its x64
DirectML.dll goes beside the program's onnxruntime.dll (a DLL in the program's folder is loaded before System32's).

Sources: nuget.org's Microsoft.AI.DirectML page (1.15.4, "DirectML Redistributable Package"); xandergos/terrain-
diffusion-mc#112 (System32's DirectML.dll 1.0.2007.1310 on an RX 9070 XT; DirectML.dll 1.15.4 from the NuGet package
made the DirectML build run)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


NEWEST_REDIST = "1.15.4"   # Microsoft.AI.DirectML on nuget.org
# DirectML.dll's version as Windows tools print it (wmic's "Version" column, PowerShell's FileVersion, Explorer)
# DirectML.dll's version: on the DLL's own line ("DirectML.dll 1.8.0"), or a four-part file version as Windows tools
# print it under the DLL (wmic's "Version" column, PowerShell's FileVersion: 1.0.2007.1310)
_DLL_VERSION = re.compile(r"(?i)directml\.dll\b[^\n]{0,120}?\b(1)\.(\d+)\.\d+(?:\.\d+)?\b|\b(1)\.(\d{1,2})\.\d+\.\d+\b")
_SYSTEM32 = re.compile(r"(?i)system32\\+directml\.dll")
_FAILS = re.compile(r"(?i)onnxruntime|DmlExecutionProvider|DirectML\b.{0,60}(?:crash|fail|error)|init\w* fail|"
                    r"DLL initiali[sz]ation|0x8007045a|LoadLibrary|crash")


@rule("rocm-libs-missing")
def old_system_directml(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: System32's DirectML.dll shown with a version older than the redistributable's line, beside
    onnxruntime / DirectML failing."""
    text = _text(ctx)
    if not _SYSTEM32.search(text) or not _FAILS.search(text):
        return None
    version = None
    for m in _DLL_VERSION.finditer(text):
        minor = int(m.group(2) or m.group(4))
        if minor < int(NEWEST_REDIST.split(".")[1]):
            version = re.search(r"1\.\d+\.\d+(?:\.\d+)?", m.group(0)).group(0)
            break
    if version is None:
        return None
    lines = _lines_matching(ctx, _SYSTEM32)
    return _make("rocm-libs-missing", f"onnxruntime's DirectML loads Windows' old DirectML.dll {version}",
                 f"the program does not ship DirectML's redistributable, so Windows loads C:\\Windows\\System32\\"
                 f"DirectML.dll, version {version}: older than the DirectML that onnxruntime's DirectML provider is built "
                 "for, and it fails to initialise on it",
                 f"get the DirectML redistributable from NuGet: the Microsoft.AI.DirectML package ({NEWEST_REDIST}, "
                 f"nuget.org/packages/Microsoft.AI.DirectML; the .nupkg is a zip) and put its x64 DirectML.dll beside "
                 "the program's onnxruntime.dll (a DLL in the program's folder is loaded before System32's; copying it "
                 "over System32's is what users did too); then start the program again",
                 [], lines[:2])
