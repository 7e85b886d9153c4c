"""The AMD web UIs' own ZLUDA installer failing on a bug in its code: "Failed to install ZLUDA: <exception>" is how the
installers of lshqqytiger's stable-diffusion-webui-amdgpu, its Forge sibling and SD.Next (and the forks copied from
them) report any exception while fetching and patching ZLUDA, and the web UI then falls back to the CPU torch ("Using
CPU-only torch"). Where the exception is one of Python's own about the code (a name not defined, an attribute missing,
None subscripted, an unexpected argument), the installer script is broken in that copy of the web UI: the HIP SDK,
the GPU and the environment variables are not what failed, and reinstalling with them changed nothing.

The way out is a copy of the web UI whose installer works: update the one in use (git pull), or, for a fork that
carries the broken script, the maintained AMD forks with the same install steps -- lshqqytiger's
stable-diffusion-webui-amdgpu (AUTOMATIC1111's UI) or stable-diffusion-webui-amdgpu-forge (Forge's).

Sources: the installers' `print(f'Failed to install ZLUDA: {e}')` (lshqqytiger's web UIs' zluda installer module,
SD.Next's installer's log.warning of the same words; found by string search in their code);
likelovewant/stable-diffusion-webui-forge-on-amd#2 ("Failed to install ZLUDA: name 'HIPSDK' is not defined", then
"Using CPU-only torch"; the maintainer: use lshqqytiger's stable-diffusion-webui-amdgpu-forge instead, same steps)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

# the installer's report with an exception about its own code
_CODE_BUG = re.compile(r"(?i)Failed to install ZLUDA:\s*(?:name '\w+' is not defined|'\w+' object (?:is not "
                       r"subscriptable|has no attribute|is not callable)|\w+\(\) got an unexpected keyword|module '[\w.]+'"
                       r" has no attribute|cannot import name|local variable '\w+' referenced before assignment)")
_FORGE = re.compile(r"(?i)\bforge\b")
_SDNEXT = re.compile(r"(?i)\bSD\.?\s?Next\b|\bsdnext\b|vladmandic")


@rule("torch-build")
def zluda_installer_bug(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: the web UI's "Failed to install ZLUDA:" with a Python error about the installer's own code."""
    lines = _lines_matching(ctx, _CODE_BUG)
    if not lines:
        return None
    text = _text(ctx)
    forge = bool(_FORGE.search(text))
    if _SDNEXT.search(text) and not forge and not re.search(r"(?i)\ba1111\b|automatic1111|webui\.bat", text):
        fork = "update SD.Next (git pull in its folder), then start it with --use-zluda --reinstall"
    else:
        ui = ("lshqqytiger's stable-diffusion-webui-amdgpu-forge (Forge's UI; or stable-diffusion-webui-amdgpu for "
              "AUTOMATIC1111's)" if forge else
              "lshqqytiger's stable-diffusion-webui-amdgpu (AUTOMATIC1111's UI) or stable-diffusion-webui-amdgpu-forge "
              "(Forge's)")
        fork = (f"update this web UI (git pull in its folder) in case the script was fixed; for a fork that still "
                f"carries it, use the maintained AMD fork with the same install steps: {ui}, started with --use-zluda "
                f"(a fresh folder, or delete the venv so its torch is installed again)")
    return _first(_make(
        "torch-build", "the web UI's ZLUDA installer fails on a bug in its own code",
        "the installer script raised a Python error about its own code while fetching ZLUDA, so the web UI fell back "
        "to the CPU-only torch; the HIP SDK and its variables are not what failed",
        fork, [ctx.line_fact(lines[0])], lines[:1]))
