"""A Slurm GPU job in a container (pyxis / enroot, apptainer, docker under srun) that finds no CUDA device although it
asked for one (--gres=gpu, --gpus), on a cluster whose cgroup.conf does not constrain devices (visibility). Without
ConstrainDevices=yes Slurm does not confine the job to its GPUs: it only exports CUDA_VISIBLE_DEVICES with the node's
index of the GPU it allocated (3 for the fourth card). The container's GPU hook then mounts that one GPU, which CUDA
inside numbers 0, so CUDA_VISIBLE_DEVICES=3 points at nothing ("no CUDA-capable device is detected", /dev/nvidia3
missing); only the job that was given GPU 0 works. With ConstrainDevices=yes the job's cgroup holds just its GPUs and
Slurm numbers CUDA_VISIBLE_DEVICES from 0 within them.

Sources: Slurm's cgroup.conf man page (ConstrainDevices, read by the task/cgroup plugin: "constrain the job's allowed
devices based on GRES allocated resources"; changes take effect on a restart of the daemons or scontrol reconfigure);
NVIDIA/pyxis#47 (the reporter's ConstrainDevices=yes fixed every GPU count)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, rule, _text

_SLURM = re.compile(r"(?i)#SBATCH\b|\bsbatch\b|\bsrun\b|\bsalloc\b|\bslurm\b")
_ASKED = re.compile(r"(?i)--gres[= ]\S*gpu|--gpus(?:-per-(?:node|task|socket))?[= ]|\bgres\s*=\s*\S*gpu")
_CONTAINER = re.compile(r"(?i)\benroot\b|\bpyxis\b|--container-(?:image|name)\b|\bapptainer\b|\bsingularity\b|"
                        r"\bdocker run\b|\bpodman run\b")
# the job finding no GPU: CUDA's words, nvidia-smi's, a device node that is not there
_NO_DEVICE = re.compile(r"(?i)no CUDA-capable device is detected|No CUDA GPUs are available|cudaErrorNoDevice|"
                        r"CUDA_ERROR_NO_DEVICE|\bNo devices (?:were )?found\b|cannot access '?/dev/nvidia\d+'?:? No such "
                        r"file|/dev/nvidia\d+'?:? No such file or directory|invalid device ordinal")
_CONSTRAINED = re.compile(r"(?im)^\s*ConstrainDevices\s*=\s*yes\b")


@rule("visibility")
def unconstrained_gpu_index(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: Slurm asked for GPUs, a container, the job finding no device, and no ConstrainDevices=yes in sight
    (a cgroup.conf shown without it makes it settled, else it is the likely cause)."""
    text = _text(ctx)
    if not (_SLURM.search(text) and _ASKED.search(text) and _CONTAINER.search(text)) or _CONSTRAINED.search(text):
        return None
    said = _lines_matching(ctx, _NO_DEVICE)
    if not said:
        return None
    shown = bool(re.search(r"(?i)cgroup\.conf|\bConstrain(?:Cores|RAMSpace|SwapSpace)\b", text))
    diagnosis = _make(
        "visibility", "Slurm does not constrain devices, so the container's GPU index points at nothing",
        "without ConstrainDevices=yes in cgroup.conf Slurm does not confine the job to its GPUs; it exports "
        "CUDA_VISIBLE_DEVICES with the node's own index of the GPU it gave the job, the container's GPU hook mounts "
        "only that GPU (numbered 0 inside), and an index other than 0 finds no device: only the job given the "
        "node's first GPU works",
        "constrain the devices: add ConstrainDevices=yes to /etc/slurm/cgroup.conf on every GPU node (slurm.conf's "
        "TaskPlugin must include task/cgroup, which reads it; gres.conf must list the GPUs' device files, "
        "File=/dev/nvidia[0-7] or AutoDetect=nvml), then restart slurmd (or scontrol reconfigure); the job then "
        "sees only its GPUs, numbered from 0; check with srun --gres=gpu:1 <container flags> nvidia-smi -L and "
        "echo $CUDA_VISIBLE_DEVICES",
        [], said[:2], confirmed=shown)
    # some GPU device nodes missing (the container's hook ran: it mounted a GPU, not the one the index names), or the
    # cgroup.conf shown: ahead of the readings of a container that got no GPU at all (enroot's hook not run)
    nodes = re.search(r"/dev/nvidia\d+'?:? No such file", text)
    return _first(diagnosis) if (nodes or shown) else diagnosis
