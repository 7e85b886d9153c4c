"""A desktop app that bundles its own CUDA torch and greys its GPU option out when that torch finds no CUDA device: on
an NVIDIA card the usual cause is a driver older than the CUDA the bundle was built with (the app has no other way to
say it); on an AMD or Intel card the app's CUDA build cannot use the GPU at all and its other build is the fix.

The table holds each app's own name for the option and its other builds. Ultimate Vocal Remover: its maintainer
(Anjok07/ultimatevocalremovergui#330) says the GPU Conversion box is disabled when CUDA isn't available; #1105 (an
MX150, fixed by a driver update); #1272 and #727 (Intel and AMD cards: the OpenCL / DirectML build of 5.6)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule, _text, _vendor


@dataclass(frozen=True)
class GpuOptionApp:
    name: str
    names: str          # what names the app in a paste (its option's own label counts)
    option: str         # its GPU option as its window labels it
    other_build: str    # its build for AMD / Intel GPUs ("" where it has none)
    source: str


APPS = (
    GpuOptionApp("Ultimate Vocal Remover", r"(?i)Ultimate Vocal Remover|\bUVR\s?v?5?(?:\.\d+)*\b|\bGPU Conversion\b",
                 "GPU Conversion", "its OpenCL build (UVR 5.6's 'OpenCL' download from the releases page, which runs "
                 "on AMD and Intel GPUs through DirectML)", "ultimatevocalremovergui issues 330, 1105, 1272, 727"),
)

# the option said to be unavailable: "can't select GPU conversion", "GPU Conversion is greyed out", "button inactive"
_OPTION_OFF = re.compile(r"(?i)\b(?:can'?t|cannot|can not|unable to|won'?t let me|doesn'?t let me)\s+(?:select|tick|"
                         r"check|enable|choose|click|activate)\b|\b(?:greyed|grayed)(?: out)?\b|"
                         r"\b(?:not|isn'?t|is not)\s+(?:selectable|clickable|active|available|enabled|checkable)\b|"
                         r"\binactive\b|\bdisabled\b")


@rule("driver")
def app_gpu_option_unavailable(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an app of the table named (its option's label names it), the user's word that the GPU option cannot
    be chosen, no error line of another family. The GPU's vendor picks the reading: NVIDIA the driver, AMD / Intel the
    app's other build."""
    text = _text(ctx)
    app = next((a for a in APPS if re.search(a.names, text)), None)
    said = _lines_matching(ctx, _OPTION_OFF)
    if app is None or not said or any(e.family not in (None, "driver", "torch-build", "visibility")
                                      for e in ctx.errors):
        return None
    vendor = _vendor(ctx) or ("intel" if re.search(r"(?i)\bIntel\b.{0,20}\b(?:Arc|Iris|UHD|HD Graphics)\b", text)
                              else None)
    gpu = next((f.value for f in ctx.sheet.of("gpu")), None)
    if vendor in ("amd", "intel"):
        if not app.other_build:
            return None
        maker = "AMD" if vendor == "amd" else "Intel"
        return _make("torch-build", f"{app.name}'s CUDA build on an {maker} GPU",
                     f"{app.name}'s standard build runs its models on a CUDA torch, which only NVIDIA GPUs run; its "
                     f"{app.option} option stays off on {gpu or 'this GPU'}",
                     f"install {app.other_build}, then enable {app.option} and pick the GPU in its settings",
                     [], said[:1])
    card = f" for the {gpu}" if gpu else ""
    return _make("driver", f"{app.name}'s bundled torch finds no CUDA device",
                 f"{app.name} ships its own CUDA build of torch and greys {app.option} out when that torch finds no "
                 "usable CUDA device; on an NVIDIA card that is almost always a driver older than the CUDA the "
                 "bundle was built with (the CUDA version nvidia-smi reports is the newest the driver runs)",
                 f"update the NVIDIA graphics driver{card} to the newest release from nvidia.com (a clean install), "
                 f"reboot, then check nvidia-smi's 'CUDA Version' and reopen {app.name}: {app.option} becomes "
                 "selectable; a card NVIDIA no longer updates stays on the CPU (or an older release of the app)",
                 [], said[:1], confirmed=gpu is not None)
