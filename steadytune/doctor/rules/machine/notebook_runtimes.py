"""A hosted notebook (Google Colab) attached to a CPU runtime: the code runs on Google's VM, not on the user's PC, so
the GPU in the user's own machine (a Radeon, say) plays no part, and a VM given no accelerator answers with torch's
"Found no NVIDIA driver on your system" / "No CUDA GPUs are available" or an empty nvidia-smi. The fix is the
notebook's runtime type, not a driver or a torch build.

Source: Isi-dev/Google-Colab_Notebooks#11 (a user with an RX 6600 got "Found no NVIDIA driver" in Colab notebooks; the
maintainer: the local card is irrelevant, the notebook ran on a CPU runtime; Runtime -> Change runtime type ->
Hardware accelerator: GPU). Colab's menu names: Runtime -> Change runtime type (Colab's FAQ, "How can I use GPUs")."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_COLAB = re.compile(r"(?i)\bcolab\b|\bgoogle\W{0,3}coll?ab\b|colab\.research\.google\.com|\bgoogle\.colab\b")
_NO_GPU = re.compile(r"(?i)Found no NVIDIA driver|No CUDA GPUs are available|torch\.cuda\.is_available\(\)\W{0,5}False|"
                     r"NVIDIA-SMI has failed|nvidia-smi\W{0,3}(?:command )?not found|"
                     r"\bno GPU (?:found|available|detected)\b|GPU (?:is )?not (?:available|found|detected)")


@rule("visibility")
def colab_cpu_runtime(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Colab named and the notebook finding no NVIDIA GPU ("Google collab", as users misspell it, counts)."""
    text = _text(ctx)
    if not _COLAB.search(text):
        return None
    lines = _lines_matching(ctx, _NO_GPU)
    if not lines:
        return None
    return _first(_make(
        "visibility", "the Colab notebook runs on a runtime without a GPU",
        "a Colab notebook runs on Google's virtual machine, not on this PC, so the GPU in the user's own machine does "
        "not matter; the runtime it is attached to has no accelerator, so torch finds no NVIDIA driver there",
        "in Colab: Runtime -> Change runtime type -> Hardware accelerator: a GPU, Save, then run "
        "the cells again from the top (!nvidia-smi in a cell must list the GPU); when no GPU is granted (usage limits), "
        "wait or use a paid tier", [ctx.line_fact(lines[0])], lines[:1]))
