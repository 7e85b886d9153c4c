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
# torch's release, for the triton-windows pin (torch 2.6 -> triton 3.2, 2.7 -> 3.3, 2.8 -> 3.4, 2.9 -> 3.5, 2.10 -> 3.6)
_TORCH = re.compile(r"(?i)\btorch(?:==|\s+|\s*version:?\s*)v?2\.(\d+)")
# torch 2.N -> the triton-windows bound. Checked round 19: torch 2.6 ships Triton 3.2 (woct0rdho/triton-windows#50,
# torch's build matrix: 2.6.0 -> triton 3.2.0); triton-windows' v3.6.0-windows.post24 release notes ("Triton 3.6 only
# works with PyTorch >= 2.10 ... pip install -U "triton-windows<3.7""), the same one-minor-per-torch step; 2.7 -> <3.4,
# 2.8 -> <3.5, 2.9 -> <3.6 as installers pin them (e.g. a ComfyUI setup script's spec_por_torch table, and
# Wildminder/AI-windows-whl's answer that torch 2.8 needs triton 3.4), not from a table of the maintainer's own.
# Checked v20 against the maintainer's own table: woct0rdho/triton-windows README.md ("Each PyTorch minor version is
# only guaranteed to work with a specific Triton minor version": 2.4 and 2.5 -> 3.1, 2.6 -> 3.2, 2.7 -> 3.3, 2.8 -> 3.4,
# 2.9 -> 3.5, 2.10 -> 3.6; its install line for 3.6 is pip install -U "triton-windows<3.7"), so each pin below is the
# next minor after torch's Triton; 2.10 added from the same table (2.4 / 2.5 -> <3.2 left out: whether triton-windows
# 3.1 wheels are on PyPI was not checked)
_TRITON_FOR_TORCH = {6: "3.3", 7: "3.4", 8: "3.5", 9: "3.6", 10: "3.7"}


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


# torch shown as a CUDA 12.8-or-newer build (a +cu128 tag, an image or index named for it: ComfyUI-Docker's
# cu128-megapak, whl/cu129): its own kernels carry Blackwell's sm_120
_TORCH_FOR_BLACKWELL = re.compile(r"(?i)(?<![\w.])cu1(?:2[89]|3\d)(?![\d.])|\+cu1(?:2[89]|3\d)\b")
_NO_KERNEL = re.compile(r"(?i)no kernel image is available|cudaErrorNoKernelImageForDevice")
# the nodes and apps that pick a compiled attention kernel by an option of their own: (what names them, the node or
# app, its switch back to torch's attention). Sources: kijai's ComfyUI-WanVideoWrapper and HunyuanVideoWrapper model
# loaders (attention_mode: sdpa, flash_attn_2 / flash_attn_3 or flash_attn_varlen, sageattn / sageattn_varlen),
# KJNodes' PathchSageAttentionKJ node (sage_attention: disabled), ComfyUI's cli_args (--use-sage-attention,
# --use-flash-attention; torch's own with --use-pytorch-cross-attention)
_ATTENTION_SWITCHES = (
    (r"WanVideo\w*", "the WanVideo wrapper",
     "set attention_mode in the WanVideo Model Loader node to sdpa (torch's own attention; flash_attn_2 / flash_attn_3 "
     "only where a flash-attn built for this GPU is installed) instead of sageattn"),
    (r"HyVideo\w*|HunyuanVideo\w*Wrapper", "the HunyuanVideo wrapper",
     "set attention_mode in the HunyuanVideo Model Loader node to sdpa (or flash_attn_varlen where a flash-attn built "
     "for this GPU is installed) instead of sageattn_varlen"),
    (r"Pathch?SageAttentionKJ|Patch Sage Attention", "KJNodes' Patch Sage Attention",
     "set the Patch Sage Attention KJ node's sage_attention to disabled (or bypass the node); flash_attn or sdpa "
     "attention then runs"),
    (r"--use-(?:sage|flash)-attention", "ComfyUI",
     "start ComfyUI without --use-sage-attention / --use-flash-attention (torch's own attention then runs: "
     "--use-pytorch-cross-attention), until the package is built for this GPU"),
)


@rule("attention")
def attention_kernels_without_blackwell(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: "no kernel image" on a Blackwell card under a torch shown as a CUDA 12.8+ build (so torch's own
    kernels are there), with a node or app that runs a compiled attention kernel of its own choosing (a table) or the
    kernel package named: that package's build lacks the card's code, and the node's switch goes back to torch's."""
    text = _text_of(ctx)
    failing = _lines_matching(ctx, _NO_KERNEL)
    blackwell = any(re.fullmatch(r"sm_1[02]\d", a) for a in ctx.sheet.machine_archs) or _BLACKWELL.search(text)
    if not failing or not blackwell or not _TORCH_FOR_BLACKWELL.search(text):
        return None
    switch = next(((name, how) for names, name, how in _ATTENTION_SWITCHES if re.search(names, text)), None)
    # (flash-attn or xFormers alone, with no node choosing them, keep their own build's remedy: arch_builds.yaml)
    named = re.search(r"(?i)sage-?attention|\bsageattn\w*", text)
    if switch is None and named is None:
        return None
    name, how = switch or ("the app", "turn the compiled attention off in the app (torch's own sdpa attention), "
                                      "e.g. ComfyUI without --use-sage-attention / --use-flash-attention")
    return _first(_make(
        "attention", "an attention kernel package without this GPU's code",
        f"torch here is a CUDA 12.8+ build, which carries Blackwell's kernels; the kernel without code for the card is "
        f"a compiled attention package {name} runs (SageAttention, flash-attn or xformers wheels built before sm_120, "
        "or for another torch)",
        f"{how}; or install that package built for sm_120 (SageAttention 2.2.0 or a flash-attn compiled with CUDA 12.8 "
        "and TORCH_CUDA_ARCH_LIST=\"12.0\", into the app's own Python)", [ctx.line_fact(failing[0])], failing))
