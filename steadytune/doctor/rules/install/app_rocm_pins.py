"""An app's torch taken from a ROCm index older than the torch the app pins (torch-build): a launcher or the app's own
installer names a pytorch.org ROCm index (rocm5.6) made before the torch release the app needs, so the install gets no
ROCm build of it (pip falls back to the default CUDA build, or keeps an older torch the app does not run with) and the
app runs without the AMD GPU ("GPU support did not work", bitsandbytes "compiled without GPU support"). The answer is
the app's torch from the ROCm index that carries it (fixes.TORCH_ROCM_INDEXES), in the app's own environment.

The torch an app pins, where the paste does not show the pin (a `torch==X` in the paste is used first):

  InvokeAI 5.x   torch 2.4.1 (its installer's line in invoke-ai/InvokeAI#7146: torch==2.4.1 torchvision==0.19.1 asked
                 of whl/rocm5.6; the fix there, #7147, takes rocm6.1; LykosAI/StabilityMatrix#1150: Stability Matrix's
                 InvokeAI package pinned rocm5.6 on an RX 7800 XT, and InvokeAI's manual install with rocm6.1 worked)
                 (rechecked in round 18: #7146 reports Invoke 5.1.1 / 5.2.0 asking for torch 2.4.1 with ROCm 5.6, and
                 #7147's summary says "The Invoke installer tries to install torch 2.4.1 with ROCm 5.6 support")
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.fixes import TORCH_ROCM_INDEXES, rocm_indexes_for_torch
from steadytune.doctor.rules.base import (Context, Diagnosis, _first, _lines_matching, _make, on_windows, _text, _vendor,
                                          rule)
from steadytune.doctor.rules.install.app_torch import APPS, app_python

# app -> (what names it, the torch release its install pins, the torchvision paired with it)
_APP_TORCH = {"InvokeAI": (r"(?i)\binvoke\s?ai\b", "2.4.1", "0.19.1")}
# a pytorch.org ROCm index label as installers write it (rocm5.6, whl/rocm6.2.4), not a ROCm release in words
_ROCM_LABEL = re.compile(r"(?<![\w.])(?:whl/)?rocm(\d+\.\d+(?:\.\d+)?)\b")
_PIN = re.compile(r"\btorch==(\d+\.\d+\.\d+)\b")
# the app without the GPU: the user's words, or what its libraries print when torch has no GPU build
_NO_GPU = re.compile(r"(?i)\bno GPU support\b|\bGPU support (?:did not|didn'?t|does not|doesn'?t) work|compiled without GPU "
                     r"support|\btorch device:? CPU\b|\b(?:uses?|using|runs? on|falls? back to) (?:the )?CPU\b|"
                     r"(?:not|n't) (?:detect|see|find|use)\w*\s+(?:my |the |an? )?(?:AMD )?(?:GPU|card)")


@rule("torch-build")
def rocm_index_older_than_the_apps_torch(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: a ROCm index label the install takes, a torch pin (shown, or the app's from the table) that index
    does not carry, an AMD GPU on Linux, and the app said to run without the GPU. pip's own "from versions" answer is
    install/wheels.py's reading."""
    text = _text(ctx)
    if _vendor(ctx) != "amd" or on_windows(ctx, text) or re.search(r"(?i)from versions:", text):
        return None
    labels = [m.group(1) for m in _ROCM_LABEL.finditer(text)]
    said = _lines_matching(ctx, _NO_GPU)
    if not labels or not said:
        return None
    pinned = _PIN.search(text)
    app = next((name for name, (names, _, _) in _APP_TORCH.items() if re.search(names, text)), None)
    if pinned:
        torch, vision = pinned.group(1), None
    elif app:
        torch, vision = _APP_TORCH[app][1], _APP_TORCH[app][2]
    else:
        return None
    carried = rocm_indexes_for_torch(torch)
    old = f"rocm{labels[0]}"
    if not carried or old in carried:
        return None
    version = tuple(int(x) for x in labels[0].split("."))
    if version >= tuple(int(x) for x in carried[-1][4:].split(".")):
        return None   # an index newer than those of the pin: not the reason
    last = max((release for release, indexes in TORCH_ROCM_INDEXES.items() if old in indexes), default=None)
    new = carried[-1]
    launcher = next((a for a in APPS if re.search(a.names, text) and a.name == "Stability Matrix"), None)
    python = app_python(launcher, False) if launcher else None
    pip = python.replace("<package>", app or "<package>") if python else "pip"
    packages = f"torch=={torch} " + (f"torchvision=={vision}" if vision else "torchvision")
    who = app or "the app"
    return _first(_make(
        "torch-build", f"{who}'s torch {torch} asked of the {old} index",
        f"the install takes torch from pytorch.org's {old} index" + (f", which stops at torch {last[0]}.{last[1]}"
                                                                   if last else "") +
        f"; {who} needs torch {torch}, published for {' and '.join(carried)}, so no ROCm build of it was installed "
        "and it runs without the GPU" + (f" ({launcher.name}'s package settings pin that index)" if launcher else ""),
        f"install {who}'s torch from the ROCm index that carries it, into its own environment: {pip} install "
        f"--force-reinstall {packages} --index-url https://download.pytorch.org/whl/{new}"
        + (f" (or install {who} by hand with that index, as its manual install guide does, rather than through "
           f"{launcher.name})" if launcher else "") +
        "; python -c 'import torch; print(torch.version.hip)' in that environment must print a ROCm version",
        [ctx.line_fact(said[0])], said[:2]))
