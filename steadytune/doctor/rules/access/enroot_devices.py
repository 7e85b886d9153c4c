"""Slurm tasks bound to their own GPUs (--gpus-per-task, --gpu-bind, --ntasks-per-gpu) inside enroot containers (pyxis'
srun --container-image), where one task finds its GPU and the others find none (visibility): with enroot's
ENROOT_RESTRICT_DEV on, its 10-devices.sh hook rebuilds the container's /dev with a minimal set of devices and only the
GPUs enroot's NVIDIA hook gives the container, which does not follow Slurm's per-task binding, so all but one task lose
their device node. The same tasks without a container each see their own GPU.

Sources: enroot's doc/standard-hooks.md (10-devices.sh, setting ENROOT_RESTRICT_DEV: "Restrict /dev inside the container
to a minimal set of devices") and hooks/10-devices.sh (it does nothing while ENROOT_RESTRICT_DEV is empty); NVIDIA/pyxis#73
(the reporter: ENROOT_RESTRICT_DEV=n, or --gres so every task sees all the job's GPUs, fixed it)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_ENROOT = re.compile(r"(?i)\benroot\b|\bpyxis\b|--container-image\b")
_PER_TASK = re.compile(r"(?i)--gpus-per-task\b|--gpu-bind\b|--ntasks-per-gpu\b")
# a task that finds no GPU: nvidia-smi's "No devices found", CUDA's no-device words
_NO_DEVICE = re.compile(r"(?i)\bNo devices (?:were )?found\b|no CUDA-capable device is detected|No CUDA GPUs are "
                        r"available|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|device_count\(\)\W{0,4}(?:=+|returns?|is|->)"
                        r"\s*0\b|\bonly (?:one|the first|a single) (?:task|process|rank)\b.{0,40}\b(?:GPU|device)|"
                        r"\bthe (?:other|rest)\b.{0,30}\b(?:see|get|find|have|print)s? (?:no|0|zero) (?:GPU|device)s?\b")


@rule("visibility")
def restricted_dev_per_task(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an enroot / pyxis container, GPUs bound per task, and a task that finds no device."""
    text = _text(ctx)
    if not (_ENROOT.search(text) and _PER_TASK.search(text)):
        return None
    said = _lines_matching(ctx, _NO_DEVICE)
    if not said:
        return None
    flag = _PER_TASK.search(text).group(0)
    return _first(_make(
        "visibility", "enroot's restricted /dev drops the GPUs Slurm bound to the other tasks",
        f"Slurm binds each task to its own GPU ({flag}); with ENROOT_RESTRICT_DEV on, enroot rebuilds the container's "
        "/dev with only the GPUs its own hook gives the container, which does not follow the per-task binding, so "
        "every task but one is left without its GPU's device node",
        "turn the /dev restriction off: ENROOT_RESTRICT_DEV=n (in /etc/enroot/enroot.conf, or exported in the job "
        "before srun), then start the job again; or request the GPUs per node (--gres=gpu:N) instead of per task, so "
        "every task sees all the job's GPUs and picks its own by rank (CUDA_VISIBLE_DEVICES / LOCAL_RANK)",
        [], said[:2]))
