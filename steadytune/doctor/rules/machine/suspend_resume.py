"""An NVIDIA GPU lost after the machine slept: the driver's unified-memory module (nvidia_uvm) comes back
unusable from suspend / resume, CUDA cannot start (999, unknown error) and the program falls back to the CPU while
nvidia-smi still lists the card. Told in words ("after suspend the GPU is gone"); Ollama's GPU page gives the fix
(reload nvidia_uvm; NVreg_PreserveVideoMemoryAllocations and the nvidia-suspend services keep it from recurring).
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, _vendor, rule


# the machine slept: "after suspend", "since it woke from sleep", "suspend/resume", 休眠/睡眠后
_SLEPT = re.compile(r"(?i)\b(?:after|from|since|following|post)\b[^\n]{0,40}\b(?:suspend(?:ing|ed)?|sleep(?:ing)?|"
                    r"hibernat\w*|resum\w*|standby|wak(?:e|es|ing) ?up)\b|\bsuspend ?/ ?resume\b|"
                    r"\bwakes? (?:up )?from (?:sleep|suspend|hibernation)\b|(?:休眠|睡眠|待机)(?:后|之后|唤醒)")
# the job ends or a batch system holds it: not a computer that slept
_JOB_SUSPENDED = re.compile(r"(?i)\bslurm|\bscontrol\b|\bjob (?:was )?suspended|\bsuspended (?:job|process)|"
                            r"time\.sleep|\bsleep \d|kill -(?:STOP|CONT)|SIGSTOP|SIGCONT")
# the GPU is not used or not reachable afterwards
_GPU_GONE = re.compile(r"(?i)\bCPU\b|no compatible GPUs|cuda(?:_| )?(?:error|init)[^\n]{0,40}\b999\b|"
                       r"\bunknown error\b|is_available\(\)[^\n]{0,20}False|\bNo CUDA GPUs\b|"
                       r"(?:can ?not|can't|cannot|doesn't|does not|no longer|won't)\s+(?:find|detect|see|use)\w*\b[^\n]{0,20}\bGPU|"
                       r"\bGPU\b[^\n]{0,30}\b(?:not (?:found|detected|used)|missing|gone|lost)\b")


@rule("driver")
def nvidia_lost_after_suspend(ctx: Context) -> Optional[Diagnosis]:
    """NVIDIA's Linux driver often leaves its unified-memory module (nvidia_uvm) unusable after a suspend / resume:
    CUDA then fails to start (error 999, "unknown error") and Ollama, torch or llama.cpp fall back to the CPU while
    nvidia-smi still lists the card. Ollama's GPU page: reload the module."""
    text = _text(ctx)
    slept = _lines_matching(ctx, _SLEPT)
    if not slept or _JOB_SUSPENDED.search(text) or not _GPU_GONE.search(text) or ctx.sheet.is_windows:
        return None
    if not (any(a.startswith("sm_") for a in ctx.sheet.machine_archs) or re.search(r"(?i)\bnvidia|\bcuda\b", text)):
        return None
    if _vendor(ctx) == "amd" and not any(a.startswith("sm_") for a in ctx.sheet.machine_archs):
        return None
    stop = ("sudo systemctl stop ollama; " if "ollama" in ctx.sheet.tools else "")
    start = ("; sudo systemctl start ollama" if "ollama" in ctx.sheet.tools else "; then start the program again")
    return _first(_make(
        "driver", "the NVIDIA driver's UVM module is unusable after suspend / resume",
        "after the machine resumed from sleep, NVIDIA's nvidia_uvm kernel module is left in a state where CUDA cannot "
        "initialise (cuInit fails with 999, unknown error); the card is still listed (nvidia-smi), but the program "
        "finds no usable GPU and runs on the CPU",
        f"reload the module: {stop}sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm{start} (or reboot); to keep it "
        "from recurring, let the driver save video memory across sleep: echo 'options nvidia "
        "NVreg_PreserveVideoMemoryAllocations=1' | sudo tee /etc/modprobe.d/nvidia-power-management.conf, sudo "
        "systemctl enable nvidia-suspend nvidia-resume nvidia-hibernate, then reboot",
        slept[:1], slept[:1]))
