"""A Windows program's own install step that looks for AMD's HIP SDK (the ZLUDA installers of the Stable Diffusion web
UIs, ComfyUI-Zluda) and fails: they find the SDK through HIP_PATH, which the SDK's installer sets, and read its
version by running hipconfig / hipInfo from %HIP_PATH%bin, which must be on PATH. With the variable missing, pointing
at an uninstalled release, or its bin folder off PATH, the version comes back empty and the install stops."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule

# the step that looks for the SDK: "zluda_installer.py detect HIP SDK version", "HIP SDK not found", "cannot find HIP"
_LOOKS_FOR_SDK = re.compile(r"(?i)\b(?:detect|find|locat|read|get)\w*\b.{0,30}\bHIP SDK\b|\bHIP SDK\b.{0,30}\b(?:not "
                            r"(?:found|detected|installed)|version)\b")
_FAILED = re.compile(r"(?i)\bfail\w*|\berror\b|\bnot found\b|\bcan(?:'t|not)\b")


@rule("rocm-libs-missing")
def hip_sdk_not_found_by_an_installer(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Windows, a step that looks for the HIP SDK, a failure, and no error line of a family."""
    text = _text(ctx)
    if "HIP" not in text or not on_windows(ctx, text) or any(e.family is not None for e in ctx.errors):
        return None
    looks = _lines_matching(ctx, _LOOKS_FOR_SDK)
    if not looks or not _FAILED.search(text):
        return None
    tool = ctx.tool() or "the program's installer"
    return _make("rocm-libs-missing", "the install step does not find the HIP SDK",
                 f"{tool} finds AMD's HIP SDK through HIP_PATH and reads its version by running hipconfig from "
                 "%HIP_PATH%bin; with HIP_PATH unset or pointing at another release, or that bin folder not on PATH, "
                 "the version comes back empty and the install fails",
                 "check the SDK the way the installer does: echo %HIP_PATH% must print the installed release's folder "
                 "(C:\\Program Files\\AMD\\ROCm\\<version>\\), and add %HIP_PATH%bin to the system PATH (System "
                 "Properties > Environment Variables); then open a new terminal so hipconfig --version answers, and run "
                 "the install again (reinstall the HIP SDK if HIP_PATH is missing)",
                 [ctx.line_fact(looks[0])], looks[:1], confirmed=False)
