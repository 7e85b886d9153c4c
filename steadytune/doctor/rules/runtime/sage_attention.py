"""SageAttention older than what asks for it: pip's `sageattention` is release 1.0.6 (SageAttention 1, Triton kernels
only), while ComfyUI's --use-sage-attention modes and the nodes that patch it in (KJNodes' Patch Sage Attention and
its model-specific patches) call SageAttention 2's CUDA kernels (sageattn_qk_int8_pv_fp16_cuda, ..._fp8_cuda), which
1.x does not have, and check its version and the GPU's arch first. SageAttention 2.x is built from thu-ml/SageAttention's
sources (2.2.0 is SageAttention2++: kernels for sm_80, sm_86, sm_89, sm_90 and sm_120); on Windows the prebuilt
wheels are woct0rdho's (one per torch and CUDA), which need triton-windows. kijai/ComfyUI-KJNodes#721: an RTX 5060 Ti
with SageAttention 1.0.6, fixed by triton-windows and the SageAttention 2.2.0 Windows wheel in ComfyUI's Python."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule
from steadytune.doctor.rules.install.app_torch import app_named, app_python, windows_paste
from steadytune.doctor.rules.runtime.shared import _text_of


_SAGE = re.compile(r"(?i)sage-?attention|\bsageattn\w*")
# SageAttention 1.x said: its version, or the names only 2.x has missing from it
_OLD_RELEASE = re.compile(r"(?i)sage-?attention\W{0,3}(?:==|version\W{0,3}|v)?(1\.\d+(?:\.\d+)?)\b")
_TOO_OLD = re.compile(r"(?i)sage-?attention\w*\W{0,3}(?:is )?not new enough|cannot import name 'sageattn_\w+' from "
                      r"'sageattention'|sage-?attention\w*.{0,40}(?:too old|requires? (?:version )?2\.|needs? (?:version )?2\.)|"
                      r"Unsupported CUDA architecture\W{0,3}sm_?\d+")
# a GPU newer than the wheel installed (Blackwell consumer cards: sm_120)
_BLACKWELL = re.compile(r"(?i)\bRTX ?50[5-9]0(?: ?Ti)?\b|\bsm_?12\d\b|\bCompute Capability 12\b|\bBlackwell\b")
# torch's release, for the triton-windows pin (torch 2.6 -> triton 3.2, 2.7 -> 3.3, 2.8 -> 3.4, 2.9 -> 3.5)
_TORCH = re.compile(r"(?i)\btorch(?:==|\s+|\s*version:?\s*)v?2\.(\d+)")
_TRITON_FOR_TORCH = {6: "3.3", 7: "3.4", 8: "3.5", 9: "3.6"}


@rule("attention")
def sage_attention_too_old(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: SageAttention named with its own or a node's words that it is too old (or lacks 2.x's kernels, or
    the GPU's arch), or 1.x said beside a failure of it."""
    text = _text_of(ctx)
    if not _SAGE.search(text):
        return None
    said = _lines_matching(ctx, _TOO_OLD)
    old = _OLD_RELEASE.search(text)
    if not said:
        if not old:
            return None
        said = [e for e in ctx.errors if _SAGE.search(e.line)] or _lines_matching(ctx, r"(?i)\bsage\w*.{0,60}\b(?:fail|error)")
        if not said:
            return None
    windows = windows_paste(ctx, text) or bool(re.search(r"python_embeded|\.exe\b", text))
    app = app_named(text)
    python = (app_python(app, windows) if app else None) or ("python_embeded\\python.exe -m pip" if windows and
                                                              re.search(r"(?i)comfy", text) else "pip")
    torch = _TORCH.search(text)
    pin = (f"\"triton-windows<{_TRITON_FOR_TORCH[int(torch.group(1))]}\"" if torch and int(torch.group(1)) in
           _TRITON_FOR_TORCH else "the triton-windows release for this torch (torch 2.7: \"triton-windows<3.4\", 2.8: "
           "<3.5, 2.9: <3.6)")
    if windows:
        install = (f"{python} install -U {pin}, then the SageAttention 2.2.0 wheel built for this torch, CUDA and "
                   f"Python from woct0rdho/SageAttention's releases ({python} install sageattention-2.2.0+cu128torch"
                   "<torch>-cp3<xy>-win_amd64.whl), replacing 1.x")
    else:
        install = (f"{python} uninstall -y sageattention; git clone https://github.com/thu-ml/SageAttention; cd "
                   "SageAttention; pip install . --no-build-isolation (builds 2.2.0 for this GPU; the CUDA toolkit "
                   "must match torch's CUDA)")
    new = _BLACKWELL.search(text)
    on = f" and the {new.group(0)}" if new else ""
    release = f"SageAttention {old.group(1)}" if old else "the SageAttention installed"
    return _first(_make(
        "attention", f"{release} is older than the node{on} need",
        f"{release} is SageAttention 1 (pip's sageattention is 1.0.6, Triton kernels only); the patch asks for "
        "SageAttention 2's CUDA kernels and checks the release and the GPU's arch first" +
        (" (Blackwell, sm_120, needs 2.2.0 built with CUDA 12.8)" if new else ""),
        f"install SageAttention 2.2.0 into the app's own Python: {install}; then python -c \"import sageattention; "
        "print(sageattention.__version__)\" must not say 1.x (or run without it: the node's sage attention off, "
        "ComfyUI without --use-sage-attention)", [], said[:1]))
