"""A distributed run on Windows (or macOS) asking for NCCL: "Distributed package doesn't have NCCL built in". PyTorch's
Windows and macOS builds have no NCCL at all (torch.distributed's backends page: NCCL is Linux-only; Windows has gloo),
so a multi-GPU launcher that picks nccl (torchrun / accelerate / DeepSpeed / LLaMA-Factory's llamafactory-cli on more
than one GPU) fails at init whatever is installed. Source: hiyouga/LlamaFactory#6658 (the maintainer: train on Linux),
PyTorch's distributed documentation (backends by platform)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, on_windows, rule


_NO_NCCL = re.compile(r"(?i)Distributed package doesn'?t ha\w{1,2} NCCL(?: built in)?")
_WINDOWS_SAID = re.compile(r"(?i)windows|\bwin ?1[01]\b|视窗")
_MAC = re.compile(r"(?i)\bmacOS\b|\bMac ?OS\b|\bDarwin\b|\bApple (?:M\d|Silicon)\b|\bmps\b")


@rule("multi-gpu-transport")
def nccl_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's own "doesn't have NCCL built in" on Windows or macOS (said by the facts or in words)."""
    lines = _lines_matching(ctx, _NO_NCCL)
    if not lines:
        return None
    text = _text(ctx)
    windows = on_windows(ctx, text) or bool(_WINDOWS_SAID.search(text))
    if not windows and not _MAC.search(text):
        return None   # a Linux torch without NCCL is another build's story (a CPU or custom build)
    where = "Windows" if windows else "macOS"
    # (no lead of its own: where the multi-GPU reading reads the same message as an error line, its fix answers first)
    return _make(
        "multi-gpu-transport", f"PyTorch on {where} has no NCCL",
        f"PyTorch's {where} builds come without NCCL (it is Linux-only); the launcher asked torch.distributed for the "
        "nccl backend, which does not exist in this build, whatever is installed",
        "train on Linux - natively, or on Windows inside WSL 2 (Ubuntu), where the Linux torch with NCCL sees the GPUs; "
        "on one GPU, start the training without a distributed launcher (CUDA_VISIBLE_DEVICES=0, plain python / "
        "llamafactory-cli on a single card); gloo (backend=\"gloo\") is the only backend a Windows torch has, slow "
        "for multi-GPU training",
        [ctx.line_fact(lines[0])], lines[:1])
