"""ZLUDA built for one HIP SDK release running on another: ZLUDA's DLLs (cublas64_11, cusparse64_11, nvrtc64_112_0,
copied over torch\\lib's) call the HIP SDK's libraries, and the builds for HIP SDK 5.7 do not load on a 6.x SDK
(and the reverse). Torch's own DLLs that depend on them (caffe2_nvrtc.dll) then fail to load ("not found", WinError
126). The fix is the ZLUDA build for the installed SDK: ComfyUI-Zluda ships a patch script for each (patchzluda.bat
for 5.7, patchzluda2.bat for 6.x)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule
from steadytune.doctor.rules.install.shared import hip_sdk_release


# a DLL of torch's CUDA build (or ZLUDA's stand-ins for it) that does not load
_TORCH_DLL = re.compile(r"(?i)\b(caffe2_nvrtc|cublas64_\d+|cusparse64_\d+|nvrtc64_\w+|cudnn64_\d+|torch_cuda)\.dll\b"
                        r"[^\n]{0,60}?(?:not found|could not be (?:found|loaded)|error loading|WinError 126|"
                        r"specified module could not be found)|(?:not found|error loading|WinError 126)[^\n]{0,80}?"
                        r"\b(caffe2_nvrtc|cublas64_\d+|cusparse64_\d+|nvrtc64_\w+)\.dll")


@rule("wheel-platform")
def zluda_for_another_hip_sdk(ctx: Context) -> Optional[Diagnosis]:
    """Torch's CUDA DLLs failing to load under ZLUDA with a HIP SDK 6.x installed: the ZLUDA for that SDK."""
    text = _text(ctx)
    if "zluda" not in text.lower():
        return None
    lines = _lines_matching(ctx, _TORCH_DLL)
    sdk = hip_sdk_release(text)
    if not lines or sdk is None:
        return None
    major, minor = sdk
    if major != "6":
        return None   # ZLUDA's default builds are the 5.7 ones: on 5.7 the DLLs' absence is a patch not applied
    return _make("wheel-platform", f"ZLUDA built for another HIP SDK than {major}.{minor}",
                 f"the ZLUDA DLLs patched into torch\\lib are the build for HIP SDK 5.7 (the default of the ZLUDA "
                 f"install scripts), and HIP SDK {major}.{minor} is installed: they do not load on it, so torch's DLLs "
                 "that depend on them fail too",
                 f"install the ZLUDA build for HIP SDK {major}.x: in ComfyUI-Zluda run patchzluda2.bat (the patch "
                 "script for HIP SDK 6.x; patchzluda.bat is the 5.7 one), elsewhere the ZLUDA release made for ROCm 6 "
                 "(its DLLs renamed into torch\\lib as the install guide says); then delete ZLUDA's cache "
                 "(%LOCALAPPDATA%\\ZLUDA\\ComputeCache) and start again; or install HIP SDK 5.7.1 for the ZLUDA in "
                 "place", [ctx.line_fact(lines[0])], lines[:2])
