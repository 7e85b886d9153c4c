"""A container started by enroot (directly, or through Slurm's pyxis plug-in: srun --container-image) that finds no
NVIDIA driver: enroot's NVIDIA hook (hooks/98-nvidia.sh, run by `enroot start`) exits without doing anything unless
NVIDIA_VISIBLE_DEVICES is set (and not "void") in the container's environment, and gives only the "utility"
capability when NVIDIA_DRIVER_CAPABILITIES is empty. NVIDIA's CUDA images set both; a plain ubuntu / python image
does not, so the driver's libraries and device files never reach it, though the same image runs under docker --gpus
(which sets them itself). Sources: enroot's hooks/98-nvidia.sh and doc/standard-hooks.md; NVIDIA/enroot#205 (the
maintainer: set NVIDIA_VISIBLE_DEVICES)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_ENROOT = re.compile(r"(?i)\benroot\b|\bpyxis\b|--container-image\b")
# the driver missing inside, in torch's, CUDA's and the tools' words
_NO_DRIVER = re.compile(r"(?i)Found no NVIDIA driver|no NVIDIA driver (?:on|is installed|found)|nvidia-smi:? (?:command )?"
                        r"not found|No CUDA GPUs are available|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|no CUDA-capable "
                        r"device is detected|CUDA driver version is insufficient|libcuda\.so(?:\.1)?: cannot open|"
                        r"is_available\(\)\W{0,12}(?:returns?\W{0,3})?False")
# NVIDIA's own images (NGC's, nvidia/cuda) set NVIDIA_VISIBLE_DEVICES in their ENV: the hook runs for them
_NVIDIA_IMAGE = re.compile(r"(?i)nvcr\.io|\bnvidia/(?:cuda|pytorch|tensorflow)\b")
# an AMD machine (ROCm's variables and tools): enroot's NVIDIA hook is not how its GPUs arrive
_AMD = re.compile(r"(?i)\bROCR_VISIBLE_DEVICES\b|\bHIP_VISIBLE_DEVICES\b|\brocm|\bRadeon\b|\bInstinct\b|\bMI\d{3}X?\b")
_SET = re.compile(r"(?i)\bNVIDIA_VISIBLE_DEVICES\s*=\s*[\"']?(?!void\b|none\b)\w")


@rule("env-not-applied")
def enroot_without_visible_devices(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an enroot / pyxis container, no driver inside, and NVIDIA_VISIBLE_DEVICES not set in the paste."""
    text = _text(ctx)
    if not _ENROOT.search(text) or _SET.search(text) or _NVIDIA_IMAGE.search(text) or _AMD.search(text):
        return None
    said = _lines_matching(ctx, _NO_DRIVER)
    if not said:
        return None
    return _first(_make(
        "env-not-applied", "enroot's NVIDIA hook did not run: NVIDIA_VISIBLE_DEVICES is not set",
        "enroot puts the NVIDIA driver and the GPUs into a container only when NVIDIA_VISIBLE_DEVICES is set in its "
        "environment (its 98-nvidia.sh hook exits otherwise); NVIDIA's CUDA images set it, this image does not, so the "
        "container has no driver even though the job was given GPUs (docker --gpus sets it by itself)",
        "set it for the container: export NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility before "
        "srun (pyxis starts the container with the job's environment; Slurm's --gpus still decides which GPUs), or "
        "ENV NVIDIA_VISIBLE_DEVICES=all and ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility in the image's Dockerfile, "
        "or enroot start --env NVIDIA_VISIBLE_DEVICES=all (an environ file in ENROOT_CONFIG_PATH/environ.d for every "
        "container); without compute in the capabilities the hook mounts nvidia-smi but not libcuda",
        [], said[:1]))


# nvidia-container-cli refusing a GPU index that the container cannot see ("device error: 4: unknown device")
_UNKNOWN_DEVICE = re.compile(r"(?i)nvidia-container-cli:? device error:? [\w-]+: unknown device")
_SLURM = re.compile(r"(?i)\bslurm\b|\bsrun\b|\bsbatch\b|\bsalloc\b|--gres\b|\bpyxis\b|\ballocat(?:ed|ion)\b")


@rule("visibility")
def enroot_host_indices(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: enroot (or pyxis) named, a cluster allocation, and nvidia-container-cli refusing a GPU index.

    Under Slurm the job's cgroup holds only the allocated GPUs, renumbered from 0 inside it; host indices kept in
    NVIDIA_VISIBLE_DEVICES ("0,1,4,5") name GPUs the container cannot reach. The enroot maintainer's answer
    (NVIDIA/enroot#207): leave NVIDIA_VISIBLE_DEVICES=all and let Slurm's GPU gres choose the GPUs."""
    text = _text(ctx)
    if not _ENROOT.search(text) or not _SLURM.search(text):
        return None
    said = _lines_matching(ctx, _UNKNOWN_DEVICE)
    if not said:
        return None
    # the GPUs the job was meant to have, where the paste lists their indices ("devices 0,1,4,5"): that many in the gres
    listed = re.search(r"(?i)(?:devices?|NVIDIA_VISIBLE_DEVICES)\W{1,4}(\d+(?:\s*,\s*\d+)+)", text)
    count = str(len(listed.group(1).split(","))) if listed else "<N>"
    return _first(_make(
        "visibility", "enroot was given host GPU indices the allocation does not hold",
        "inside a Slurm allocation only the allocated GPUs exist for the job (renumbered from 0); NVIDIA_VISIBLE_DEVICES "
        "kept with the host's indices names GPUs outside it, so nvidia-container-cli refuses them as unknown devices",
        "leave the selection to Slurm: NVIDIA_VISIBLE_DEVICES=all for the container (enroot start --env "
        "NVIDIA_VISIBLE_DEVICES=all, or export it before srun with pyxis) and ask for the GPUs with the gres "
        f"(srun --gres=gpu:{count} / --gpus={count}); the container then gets exactly the job's GPUs",
        [], said[:1]))
