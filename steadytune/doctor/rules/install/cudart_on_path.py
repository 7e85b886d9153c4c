"""A CUDA runtime of another program found first on the search path: the tool then reads the GPU through that old
runtime and gets a capability no driver of this GPU reports (Ollama's "Compute Capability detected: 1.0" on a 5.2
card, ollama #4008). Not an old GPU (gpu_unsupported.py): the library that answered is the cause."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, on_windows, rule, _text

# a capability of 1.x reported for the card, or the same card reported at two capabilities ("previously 5.2, now 1.0")
_ONE_DOT = re.compile(r"(?i)compute capability(?: detected)?[:\s]+1\.\d\b")


@rule("rocm-libs-missing")
def cuda_runtime_of_another_program(ctx: Context) -> Optional[Diagnosis]:
    lines = _lines_matching(ctx, _ONE_DOT.pattern)
    text = _text(ctx)
    if not lines:
        return None
    named = [g for g in ctx.sheet.of("gpu") if re.fullmatch(r"sm_[2-9]\d|sm_1\d\d", g.detail or "")]
    also = re.findall(r"(?i)compute capability(?: detected)?[:\s]+([2-9]|1[0-2])\.\d\b", text)
    if not (named or also):
        return None   # nothing says the card is newer than what the runtime reported
    where = ("on Windows NVIDIA's PhysX installs an old cudart in C:\\Program Files (x86)\\NVIDIA Corporation\\PhysX\\"
             "Common and puts it on PATH: remove that folder from PATH (System > Environment "
             "Variables), or put the tool's own CUDA runtime folder before it, then restart "
             "the tool") if on_windows(ctx, text) else \
        ("find the libcudart the tool loaded (OLLAMA_DEBUG=1 logs its path; ldd or LD_DEBUG=libs otherwise) and take "
         "the old one off LD_LIBRARY_PATH, so the runtime matching the driver (nvidia-smi's CUDA version) is loaded")
    return _make("rocm-libs-missing", "an old CUDA runtime answered for the GPU",
                 "the tool loaded another program's old CUDA runtime library, which reports compute capability 1.x "
                 "for a GPU whose driver knows it as newer; the GPU is then refused as too old",
                 f"the GPU is not too old: the wrong CUDA runtime library was loaded; {where}",
                 named[:1], lines[:1])
