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


# a multi-GPU launch on Windows: several GPUs made visible to a launcher, its distributed start-up line, a process
# count above one
_MULTI_LAUNCH = re.compile(r"(?i)\b(?:set\s+)?CUDA_VISIBLE_DEVICES\s*=\s*\d+\s*,\s*\d|Initiali[sz]ing distributed tasks|"
                           r"--nproc[_-]per[_-]node[= ]+[2-9]|--num_processes[= ]+[2-9]|FORCE_TORCHRUN\s*=\s*(?:1|true)")
# the launch failing without NCCL's own message: Windows' "failed to create process." from the launcher, a
# rendezvous / process-group error
_LAUNCH_FAILED = re.compile(r"(?i)failed to create process|ChildFailedError|init_process_group|"
                            r"\b(?:error|failed|exception)\b")
# trainers built on Hugging Face's Trainer take the backend as ddp_backend (TrainingArguments; a LLaMA-Factory /
# axolotl yaml key of the same name)
_HF_TRAINER = re.compile(r"(?i)llamafactory|llama-factory|LLaMA_Factory|\baxolotl\b|\bTrainer\b|TrainingArguments|"
                         r"\.ya?ml\b|transformers")


@rule("multi-gpu-transport")
def nccl_on_windows(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: torch's own "doesn't have NCCL built in" on Windows or macOS (said by the facts or in words); or,
    as the likely cause, a multi-GPU launch on Windows that fails without naming the backend (the launcher's default
    backend on CUDA is nccl)."""
    lines = _lines_matching(ctx, _NO_NCCL)
    text = _text(ctx)
    windows = on_windows(ctx, text) or bool(_WINDOWS_SAID.search(text))
    launch = False
    if not lines and windows and _MULTI_LAUNCH.search(text):
        lines = _lines_matching(ctx, _LAUNCH_FAILED)
        launch = bool(lines)
    if not lines:
        return None
    if not windows and not _MAC.search(text):
        return None   # a Linux torch without NCCL is another build's story (a CPU or custom build)
    where = "Windows" if windows else "macOS"
    gloo = ""
    if windows and _HF_TRAINER.search(text):
        # a Trainer-based tool keeps running on Windows with gloo: its ddp_backend setting (LlamaFactory#5719: the
        # commenter's ddp_backend: gloo in the training yaml started the multi-GPU run)
        gloo = ("to keep training on Windows, switch the backend to gloo: ddp_backend: gloo in the training yaml "
                "(TrainingArguments(ddp_backend=\"gloo\") in a script), which runs on several GPUs, slower than NCCL; "
                "or ")
    # (no lead of its own: where the multi-GPU reading reads the same message as an error line, its fix answers first)
    return _make(
        "multi-gpu-transport", f"PyTorch on {where} has no NCCL",
        f"PyTorch's {where} builds come without NCCL (it is Linux-only); the launcher asked torch.distributed for the "
        "nccl backend, which does not exist in this build, whatever is installed"
        + (" (on several GPUs the launcher's default backend is nccl, so the multi-GPU start fails where one GPU "
           "runs)" if launch else ""),
        gloo + "train on Linux - natively, or on Windows inside WSL 2 (Ubuntu), where the Linux torch with NCCL sees the GPUs; "
        "on one GPU, start the training without a distributed launcher (CUDA_VISIBLE_DEVICES=0, plain python / "
        "llamafactory-cli on a single card); gloo (backend=\"gloo\") is the only backend a Windows torch has, slow "
        "for multi-GPU training",
        [ctx.line_fact(lines[0])], lines[:1], confirmed=not launch)
