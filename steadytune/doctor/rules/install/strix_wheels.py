"""An RDNA 3.5 APU (gfx1150 Strix Point, gfx1151 Strix Halo) given pytorch.org's generic ROCm torch: those wheels are
built for one list of discrete archs on an older ROCm, and an installer that wanted AMD's own wheels (repo.radeon.com's
Radeon wheels) and could not reach them falls back to that index. AMD publishes torch per arch for these APUs on its
own index, https://repo.amd.com/rocm/whl/<gfx>/, built on a newer ROCm (torch 2.11.0+rocm7.13.0 there): that index is
the fix, installed into the installer's environment.

Sources: unslothai/unsloth#7280 (install.sh on a Ryzen AI 9 HX 370, gfx1150, ROCm 7.14: "Radeon repo unavailable;
falling back to ROCm index (https://download.pytorch.org/whl/rocm7.2)"; PR 7300 routes these GPUs to
repo.amd.com/rocm/whl/gfx1150/, torch 2.11.0+rocm7.13.0); unslothai/unsloth PR 5301 (gfx1151: pip download
--index-url https://repo.amd.com/rocm/whl/gfx1151/ "torch>=2.11.0,<2.12.0" resolves torch-2.11.0+rocm7.13.0).
Checked round 19: the gfx1150 index is AMD's own, not only unsloth's: AMD's ROCm 7.13 install snippets (device "stx",
pointing to rocm.docs.amd.com/en/7.13.0-preview/frameworks/pytorch/install.html) install torch==2.11.0+rocm7.13.0 with
pip install --index-url https://repo.amd.com/rocm/whl/gfx1150/, and unsloth PR 8577 lists repo.amd.com's per-arch
indexes as gfx103X / 110X / 1150 / 1151 / 120X."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_PER_ARCH = ("gfx1150", "gfx1151")
_GENERIC = re.compile(r"(?i)download\.pytorch\.org/whl/(?:nightly/)?rocm\d+\.\d+")
# what says the generic wheel was taken in place of AMD's: an installer's fallback or warning, an error, a complaint
_TOOK_IT = re.compile(r"(?i)\bfalling back\b|\bfell back\b|\bunavailable\b|\bnot (?:reachable|available|found)\b|"
                      r"\[WARN\w*\]|\bwarning\b|\berror\b|\bfail\w*\b")


@rule("wheel-platform")
def strix_apu_on_the_generic_rocm_index(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a gfx1150 / gfx1151 machine, pytorch.org's ROCm index in the paste, and a line that says the
    install fell back to it or went wrong."""
    text = _text(ctx)
    arch, fact = ctx.arch()
    if arch not in _PER_ARCH:
        return None
    index = _GENERIC.search(text)
    said = _lines_matching(ctx, _TOOK_IT)
    if not index or not said:
        return None
    url = f"https://repo.amd.com/rocm/whl/{arch}/"
    return _first(_make(
        "wheel-platform", f"pytorch.org's generic ROCm torch on {arch}",
        f"the install took torch from {index.group(0)}, whose wheels are built for discrete cards on an older ROCm; "
        f"AMD builds torch for {arch} itself, per arch, on its own index",
        f"install torch from AMD's index for {arch}: pip install --index-url {url} torch torchvision torchaudio "
        f"--force-reinstall (torch 2.11.0+rocm7.13.0 there), in the environment the tool uses (for an installer, "
        f"its venv), then python -c \"import torch; print(torch.__version__, torch.cuda.get_device_name(0))\"",
        [f for f in (fact,) if f], said[:1]))
