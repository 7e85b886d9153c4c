"""AMD's HIP SDK installer for Windows failing part way ("Error 215: A general error has occurred during the
installation of the AMD software package"): the installer bundles optional components beside the SDK itself, and
the one that fails is its Visual Studio integration (the HIP plug-in for Visual Studio, which needs a matching
Visual Studio), or the Pro driver over the Adrenalin driver a gaming card runs. ZLUDA and the web UIs need the SDK's
libraries only. CS1o in stable-diffusion-webui-amdgpu#508: rerun it with "Visual Studio" and the Pro driver
unchecked."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, rule


_SDK = re.compile(r"(?i)\bHIP[- ]?SDK\b|\bAMD[- ]Software[- ]PRO\b|\bROCm\b.{0,20}\bWindows\b")
# the installer's own failure: its numbered error and its general error, or a line that says the SDK's install failed
_INSTALLER_ERROR = re.compile(r"(?i)\bError\s*(?:code\s*)?#?\s*215\b|general error has occurred during the "
                              r"installation")
_SDK_INSTALL_FAILED = re.compile(r"(?i)\bHIP[- ]?SDK(?:\s+v?\d+(?:\.\d+)*)?(?:'s)?\s+(?:install\w*|setup)\s+(?:has\s+|keeps\s+)?"
                                 r"(?:failed|fails|failing|errors?)\b|\b(?:failed|fails|unable) to install\s+(?:the\s+)?"
                                 r"(?:AMD\s+)?HIP[- ]?SDK\b")


@rule("rocm-libs-missing")
def hip_sdk_installer_fails(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the HIP SDK named and its installer's failure."""
    text = _text(ctx)
    if not _SDK.search(text):
        return None
    said = _lines_matching(ctx, _INSTALLER_ERROR) or _lines_matching(ctx, _SDK_INSTALL_FAILED)
    if not said:
        return None
    release = re.search(r"(?i)\b(?:HIP[- ]?SDK|version)\s*v?(\d\.\d(?:\.\d)?)\b", text)
    which = f"HIP SDK {release.group(1)}" if release else "the HIP SDK"
    return _make("rocm-libs-missing", f"{which}'s installer fails in an optional component",
                 f"{which}'s installer installs optional components beside the SDK, and one of them failed, which "
                 "stops the whole install: its Visual Studio integration (needs a matching Visual Studio) or the AMD "
                 "Pro driver (which replaces the Adrenalin driver a Radeon gaming card runs)",
                 "run the installer again and uncheck the Visual Studio plug-in / Visual Studio integration and the "
                 "Pro driver, keeping the HIP SDK core, libraries and runtime (all ZLUDA and the web UIs use); reboot, "
                 "then check echo %HIP_PATH% names the installed release and hipInfo (in %HIP_PATH%bin) lists the GPU",
                 [ctx.line_fact(said[0])], said[:1])
