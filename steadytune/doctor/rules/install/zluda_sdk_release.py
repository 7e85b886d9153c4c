"""Which HIP SDK release ZLUDA (and the programs that bundle it) finds on Windows.

  - a DLL of one HIP SDK release reported missing: the HIP SDK's runtime DLLs carry their release in their names
    (hiprtcMMmm.dll is HIP SDK MM.mm's runtime compiler; amdhip64_6.dll and amd_comgr_2.dll are ROCm 6's, the
    unsuffixed amdhip64.dll / amd_comgr.dll ROCm 5's), and a program linked against one release's name loads no
    other's. The fix is that release's SDK (its bin folder on PATH); lshqqytiger/ZLUDA#3's reporter, without it, got
    ZLUDA 3.5 going with the hiprtc DLL GPUOpen's Orochi redistributes copied in under the missing name.
  - "ZLUDA device failed to pass basic operation test" (the web UIs' own check after loading ZLUDA): ZLUDA loaded,
    but its first operations fail, which is what a HIP SDK other than the one its ZLUDA build was fetched for gives:
    two SDKs installed side by side, HIP_PATH naming one and PATH the other (CS1o/Stable-Diffusion-Info#41: HIP SDK
    5.7 beside 6.2; uninstalling 5.7 and deleting the venv and .zluda folders fixed it).
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.shared import hip_sdk_release


# a HIP SDK DLL named with its release, and the loader (or the user) saying it is missing
_DLL = r"(hiprtc(\d\d)(\d\d)|amdhip64(?:_(\d+))?|amd_comgr(?:_(\d+)|(\d\d)(\d\d))?)\.dll"
_DLL_MISSING = re.compile(r"(?i)\b" + _DLL + r"\b[^\n]{0,60}?(?:was not found|not found|could not be found|is missing|"
                          r"missing|cannot be found|can't be found)|(?:missing|cannot find|can't find|not find)\s+"
                          r"(?:the )?" + _DLL)
# the HIP SDK for Windows releases AMD published (5.5, 5.7, 6.1, 6.2, 6.4): a name's release -> the one to install
_SDK_RELEASES = {(5, 5): "5.5.1", (5, 7): "5.7.1", (6, 1): "6.1.2", (6, 2): "6.2.4", (6, 4): "6.4.2"}
# comgr's major per ROCm major (ROCm 6 ships comgr 2.x, ROCm 7 comgr 3.x)
_COMGR_ROCM = {"2": "6", "3": "7"}


def _release_of(match: re.Match) -> tuple[str, Optional[tuple[int, int]]]:
    """(the DLL's name, the (major, minor) release it belongs to; minor -1 where only the major is known)."""
    groups = match.groups()
    half = 7 if groups[0] is None else 0
    name, rtc_major, rtc_minor, hip_major, comgr_major, comgr_rel_major, comgr_rel_minor = groups[half:half + 7]
    if rtc_major:
        return name, (int(rtc_major), int(rtc_minor))
    if comgr_rel_major:
        return name, (int(comgr_rel_major), int(comgr_rel_minor))
    if name.lower().startswith("amdhip64"):
        return name, (int(hip_major), -1) if hip_major else (5, -1)
    return name, (int(_COMGR_ROCM.get(comgr_major, "6")), -1) if comgr_major else (5, -1)


def _dll_of_a_release(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _DLL_MISSING)
    if not said:
        return None
    name, release = _release_of(_DLL_MISSING.search(said[0].line))
    major, minor = release
    sdk = _SDK_RELEASES.get((major, minor)) if minor >= 0 else None
    wanted = f"HIP SDK {major}.{minor}" if minor >= 0 else f"a HIP SDK {major}.x"
    install = (f"install HIP SDK {sdk}" if sdk else
               f"install {wanted}" if minor < 0 else
               f"no HIP SDK {major}.{minor} was published for Windows: use the build of the program made for the "
               "SDK you have (or the SDK its notes name)")
    installed = hip_sdk_release(text)
    other = (f"; HIP SDK {installed[0]}.{installed[1]} is installed, whose DLLs carry other names: either add the "
             f"{wanted} SDK beside it or use the program's build for {installed[0]}.{installed[1]}"
             if installed and (int(installed[0]), int(installed[1])) != release and not (
                 minor < 0 and int(installed[0]) == major) else "")
    zluda = "zluda" in text.lower()
    workaround = ("; without that SDK, users of ZLUDA report copying the hiprtc DLL GPUOpen's Orochi redistributes "
                  "(contrib/bin/win64/hiprtc0503.dll) into the ZLUDA folder, renamed to the name asked for"
                  if zluda and name.lower().startswith("hiprtc") and major == 5 else "")
    return _make("rocm-libs-missing", f"{name}.dll ({wanted}) is not found",
                 f"{name}.dll is a DLL of {wanted}: the program was linked against that release's name, and Windows "
                 "finds no such file on PATH or beside the program (a HIP SDK of another release, or none, is "
                 "installed)",
                 f"{install}; its bin folder (%HIP_PATH%bin, C:\\Program Files\\AMD\\ROCm\\<release>\\bin) holds "
                 f"{name}.dll: add it to the system PATH and open a new terminal, or copy the DLL next to the "
                 f"program{other}{workaround}", [ctx.line_fact(said[0])], said[:2])


_BASIC_TEST = re.compile(r"(?i)ZLUDA device failed to pass basic operation test")


def _basic_test_failed(ctx: Context, text: str) -> Optional[Diagnosis]:
    said = _lines_matching(ctx, _BASIC_TEST)
    if not said:
        return None
    named = sorted({f"{m.group(1)}.{m.group(2)}" for m in re.finditer(r"(?i)\bHIP SDK\s*v?(\d)\.(\d)", text)})
    if len(named) > 1:
        keep, drop = named[-1], ", ".join(named[:-1])
        keep_one = f"keep only HIP SDK {keep}: uninstall HIP SDK {drop} (Settings > Apps)"
    else:
        keep_one = ("keep a single HIP SDK: if an older HIP SDK 5.7 sits beside a 6.x one (Settings > Apps lists "
                    "both; HIP_PATH_57 and HIP_PATH_6x variables), uninstall HIP SDK 5.7")
    return _make("rocm-libs-missing", "ZLUDA's first operations fail on the HIP SDK it found",
                 "the web UI loaded ZLUDA and ran a small test on the GPU, which failed: the HIP SDK libraries ZLUDA "
                 "calls are not the release its ZLUDA build was fetched for (two HIP SDKs installed, HIP_PATH and "
                 "PATH naming different ones, or rocBLAS libraries of another release swapped in)",
                 f"{keep_one}, restart Windows, check echo %HIP_PATH% names the one kept, then delete the web UI's "
                 "venv and .zluda folders (it fetches the ZLUDA for the SDK it finds) and run webui-user.bat again; "
                 "a card whose gfx the HIP SDK's rocBLAS lacks (gfx1031, gfx1032, gfx1034) also needs the ROCmLibs "
                 "package for its gfx and that SDK release in the SDK's rocblas\\library",
                 [ctx.line_fact(said[0])], said[:1])


@rule("rocm-libs-missing")
def zluda_sdk_release(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a HIP SDK DLL of a named release missing, or the web UIs' ZLUDA test failing."""
    text = _text(ctx)
    return _basic_test_failed(ctx, text) or _dll_of_a_release(ctx, text)
