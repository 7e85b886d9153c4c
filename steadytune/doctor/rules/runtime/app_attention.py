"""An image app's attention failing on an AMD GPU run through ZLUDA or ROCm, answered with the app's own attention
switch. Under ZLUDA, torch's CUDA build sends PyTorch's fused attention (SDPA: ComfyUI's default
--use-pytorch-cross-attention, the web UI's --opt-sdp-attention) to cuDNN, which ZLUDA serves through MIOpen; where
MIOpen has no plan for the graph the run stops with a cuDNN error ("No execution plans support the graph",
CUDNN_STATUS_INTERNAL_ERROR). On ROCm the same kernel path can fault on RDNA cards. The split / sub-quadratic attention
of these apps computes attention with plain matrix products and runs there (LykosAI/StabilityMatrix#1508: ComfyUI-Zluda
on an RX 6800 XT, fixed by --use-quad-cross-attention). The switch is the app's own, from a table."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.error_lines import family
from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _vendor, rule
from steadytune.doctor.rules.runtime.shared import _text_of


# cuDNN refusing or failing the attention graph (torch's cuDNN frontend, the cuDNN status codes)
_CUDNN_FAILED = re.compile(r"(?i)cuDNN Frontend error|No execution plans support the graph|CUDNN_STATUS_[A-Z_]+|"
                           r"GET was unable to find an engine|cudnn\w*\s*(?:error|exception)")
# the attention code of the apps on a traceback line (ComfyUI's comfy/ldm/modules/attention.py, the web UI's
# sd_hijack_optimizations.py, the SDPA call itself)
_ATTENTION_FRAME = re.compile(r"(?i)\battention_pytorch\b|\bscaled_dot_product_attention\b|\boptimized_attention\w*|"
                              r"ldm[/\\]modules[/\\]attention\.py|sd_hijack_optimizations\.py|\bsdp_attnblock_forward\b|"
                              r"\bpytorch_attention\b")
# a GPU fault on ROCm (not a missing kernel: that is the arch readings')
_ROCM_FAULT = re.compile(r"(?i)Memory access fault by GPU|hipErrorIllegalAddress|HIP error: an illegal memory access|"
                         r"HSA_STATUS_ERROR_(?:MEMORY_APERTURE_VIOLATION|EXCEPTION)")
_MISSING_KERNEL = re.compile(r"(?i)invalid device function|no kernel image|hipErrorNoBinaryForGpu|shared object initiali[sz]ation")

# the apps and their attention switch, most specific first: (what names the app, its name, the switch). ComfyUI's
# cli_args.py: --use-split-cross-attention / --use-quad-cross-attention / --use-pytorch-cross-attention; the web UI's
# cmd_args.py: --opt-split-attention / --opt-sub-quad-attention / --opt-sdp-attention; Forge's and Fooocus' argument
# parsers (taken from ComfyUI's): --attention-split / --attention-quad / --attention-pytorch
# (checked round 19: comfyanonymous/ComfyUI comfy/cli_args.py; AUTOMATIC1111/stable-diffusion-webui modules/cmd_args.py;
# lllyasviel/stable-diffusion-webui-forge backend/args.py; lllyasviel/Fooocus ldm_patched/modules/args_parser.py)
_APPS = (
    (r"(?i)\bFooocus\b", "Fooocus", "start it with --attention-quad (or --attention-split) in place of --attention-pytorch"),
    (r"(?i)(?<![-\w])Forge\b", "Forge", "add --attention-quad (or --attention-split) to COMMANDLINE_ARGS in webui-user.bat, in "
                                "place of --attention-pytorch"),
    (r"(?i)\bSD\.?Next\b|\bsdnext\b|\bvladmandic\b", "SD.Next",
     "set Settings > Compute Settings > Cross-attention to Sub-quadratic (or Split) in place of Scaled-Dot-Product"),
    (r"(?i)\bComfy\s?UI\b|comfy[/\\]|\bSwarm\s?UI\b|\bStableSwarm", "ComfyUI",
     "start ComfyUI with --use-quad-cross-attention (or --use-split-cross-attention) in place of "
     "--use-pytorch-cross-attention (ComfyUI-Zluda: COMMANDLINE_ARGS in its comfyui-n.bat; Stability Matrix: the "
     "package's Launch Options; SwarmUI: the ComfyUI backend's ExtraArgs); if it still stops, add "
     "--disable-async-offload --disable-pinned-memory"),
    (r"(?i)stable-diffusion-webui|webui-user|\bA1111\b|AUTOMATIC1111|\bweb ?ui\b", "the web UI",
     "add --opt-sub-quad-attention (or --opt-split-attention) to COMMANDLINE_ARGS in webui-user.bat / .sh, in place "
     "of --opt-sdp-attention / --xformers"),
)


def _switch(text: str) -> tuple[str, str]:
    for pattern, name, fix in _APPS:
        if re.search(pattern, text):
            return name, fix
    return "the program", ("switch the program's attention to its split or sub-quadratic implementation (ComfyUI: "
                           "--use-quad-cross-attention; the web UI: --opt-sub-quad-attention) in place of PyTorch's "
                           "SDPA")


@rule("attention")
def amd_attention_through_the_app(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: ZLUDA in the paste with a cuDNN failure (any line), or a ROCm GPU fault whose traceback runs
    through the app's attention code; the app (from the table) gives the switch."""
    text = _text_of(ctx)
    zluda = ctx.tool() == "zluda" or bool(re.search(r"(?i)\bzluda\b", text))
    if zluda:
        said = _lines_matching(ctx, _CUDNN_FAILED)
        if not said:
            return None
        name, fix = _switch(text)
        return _first(_make(
            "attention", f"{name}'s PyTorch attention fails in cuDNN under ZLUDA",
            "under ZLUDA, torch's CUDA build sends PyTorch's fused attention (SDPA, the default cross-attention) to "
            "cuDNN, which ZLUDA serves through MIOpen; MIOpen has no execution plan for that graph on this GPU, so "
            "sampling stops with a cuDNN error (toggling cuDNN for the convolutions does not reach it)",
            f"{fix}; the split / sub-quadratic attention runs on plain matrix products, not cuDNN (ZLUDA's cuDNN "
            "stays off for the rest: torch.backends.cudnn.enabled = False, ComfyUI-Zluda's CFZ CUDNN Toggle node)",
            [], said[:1]))
    if _vendor(ctx) != "amd" or _MISSING_KERNEL.search(text):
        return None
    fault = _lines_matching(ctx, _ROCM_FAULT)
    if not fault or not _ATTENTION_FRAME.search(text):
        return None
    name, fix = _switch(text)
    diagnosis = _make("attention", f"{name}'s PyTorch attention faults on the AMD GPU",
                 "the GPU faults inside the attention call (PyTorch's fused SDPA kernels, which the ROCm build runs "
                 "through its own attention kernels); the app's split / sub-quadratic attention avoids that kernel",
                 f"{fix}; a newer ROCm torch (its SDPA kernels for this GPU) is the other way out",
                 [], fault[:1])
    # the traceback puts the fault in the attention call: ahead of the general reading of a GPU fault (a kernel or
    # ROCm update), whose remedy the switch does not need
    diagnosis.rank = min(diagnosis.rank, family("gpu-hang").rank - 1)
    return diagnosis


# xformers under ZLUDA: its attention kernels are CUDA machine code for NVIDIA GPUs, which ZLUDA (translating CUDA's
# PTX for a Radeon) cannot load, so the first attention call fails with CUDA's "named symbol not found"
# (CUDA_ERROR_NOT_FOUND: the kernel is not in any module ZLUDA loaded) or a missing-kernel error. The way out is the
# app's own attention switch away from xformers, to PyTorch's SDP attention (or the split / sub-quadratic one).
# Source: CS1o/Stable-Diffusion-Info#20 (OneTrainer with ZLUDA on an RX 7900 GRE: "CUDA error: named symbol not found";
# the guide's fix: Training tab > Attention set to Default or SDP instead of xformers); ComfyUI's --disable-xformers
# and the web UI's --xformers / --opt-sdp-attention are their own command-line flags (checked round 19:
# comfyanonymous/ComfyUI comfy/cli_args.py "--disable-xformers"; AUTOMATIC1111/stable-diffusion-webui modules/cmd_args.py
# "--xformers", "--opt-sdp-attention").
_XFORMERS_OFF = (
    (r"(?i)\bOne ?Trainer\b", "OneTrainer",
     "in OneTrainer's Training tab set Attention to SDP (or Default) instead of xformers"),
    (r"(?i)\bComfy\s?UI\b|comfy[/\\]", "ComfyUI",
     "start ComfyUI with --disable-xformers (PyTorch's SDP attention then runs; --use-quad-cross-attention if that "
     "fails in cuDNN)"),
    (r"(?i)stable-diffusion-webui|webui-user|\bA1111\b|AUTOMATIC1111|\bweb ?ui\b|\bForge\b|\bSD\.Next\b", "the web UI",
     "remove --xformers from COMMANDLINE_ARGS in webui-user.bat and use --opt-sdp-attention (or "
     "--opt-sub-quad-attention)"),
)
_NAMED_SYMBOL = re.compile(r"(?i)named symbol not found|CUDA_ERROR_NOT_FOUND")
_XFORMERS = re.compile(r"(?i)\bxformers\b")


@rule("attention")
def xformers_under_zluda(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: ZLUDA in the paste, and xformers failing (said with an error) or CUDA's "named symbol not found"
    on a card whose libraries AMD's HIP SDK carries (then no library is missing: the kernel that is not found is a
    CUDA-only extension's, xformers' in these apps)."""
    # lazy: imported at the top, windows_rocblas would register its rules ahead of this module's (tie order)
    from steadytune.doctor.rules.arch.windows_rocblas import _SDK_ARCHS
    text = _text_of(ctx)
    if not (ctx.tool() == "zluda" or re.search(r"(?i)\bzluda\b", text)):
        return None
    symbol = _lines_matching(ctx, _NAMED_SYMBOL)
    xformers = [e for e in ctx.errors if _XFORMERS.search(e.line)] or (symbol if _XFORMERS.search(text) else [])
    arch, _ = ctx.arch(symbol)
    if not (xformers or (symbol and (arch is None or arch in _SDK_ARCHS))):
        return None
    name, fix = next(((n, f) for p, n, f in _XFORMERS_OFF if re.search(p, text)),
                     ("the program", "turn xformers off in the program's attention setting (or pip uninstall "
                                     "xformers in its environment) so it uses PyTorch's SDP attention"))
    return _first(_make(
        "attention", f"xformers' CUDA kernels do not run under ZLUDA ({name})",
        "xformers ships attention kernels compiled for NVIDIA GPUs; ZLUDA translates CUDA's PTX for the Radeon but "
        "cannot load those, so the first attention call fails (\"named symbol not found\" is CUDA's word for a kernel "
        "not in any loaded module)" + (f"; the HIP SDK's libraries carry {arch} itself" if arch in _SDK_ARCHS else ""),
        f"{fix}; xformers does not work on AMD GPUs under ZLUDA, PyTorch's SDP attention does",
        [], (symbol or _lines_matching(ctx, _XFORMERS))[:1]))
