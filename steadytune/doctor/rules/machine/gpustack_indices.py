"""GPUStack numbering the GPUs otherwise than nvidia-smi: its worker's detector (gpustack-runtime) takes a device's
index from the driver's minor number (/dev/nvidia<N>, NVML's nvmlDeviceGetMinorNumber) while
GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY is on, its default; the minor numbers need not follow the PCI bus order
nvidia-smi lists by, so on some machines the dashboard's GPU[0] is nvidia-smi's GPU 1 and a model assigned to one
index runs on the other card. CUDA_DEVICE_ORDER=PCI_BUS_ID does not change this (it orders CUDA's enumeration, not the
minor numbers); turning the physical-index priority off makes the detector use the enumeration index.

Sources: gpustack-runtime's envs (GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY: bool = True, "Use physical index
priority at detecting devices") and its NVIDIA detector (dev_index = nvmlDeviceGetMinorNumber(dev) when it is set),
found by string search in its code; gpustack/gpustack#5784 (2x RTX PRO 6000 on RHEL 9: dashboard indices reversed
against nvidia-smi, CUDA_DEVICE_ORDER=PCI_BUS_ID did not help; the maintainer: start the worker container with
-e GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=false)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule

_GPUSTACK = re.compile(r"(?i)\bgpustack\b")
# the two numberings said to disagree: the dashboard / UI against nvidia-smi, reversed, the other GPU
_DISAGREE = re.compile(r"(?i)\b(?:opposite|reversed|swapped|the other (?:GPU|card)|wrong (?:GPU|card|index)|"
                       r"index(?:es)? (?:do(?:es)? not|don.t|doesn.t) match|mismatch\w*)\b|"
                       r"\bdashboard\b[^\n]{0,80}\bGPU ?\[?\d|\bnvidia-smi\b[^\n]{0,80}\bGPU \d\b[^\n]{0,40}\bidle\b")


@rule("visibility")
def gpustack_physical_indices(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: GPUStack named, NVIDIA GPUs, and its numbering said to disagree with nvidia-smi's."""
    text = _text(ctx)
    if not _GPUSTACK.search(text) or not re.search(r"(?i)\bnvidia\b|\bCUDA\b|\bRTX\b", text):
        return None
    lines = _lines_matching(ctx, _DISAGREE)
    if not lines or not re.search(r"(?i)\bnvidia-smi\b|\bindex\b|\bGPU ?\[?\d", text):
        return None
    tried = bool(re.search(r"CUDA_DEVICE_ORDER\s*=\s*PCI_BUS_ID", text))
    return _first(_make(
        "visibility", "GPUStack numbers the GPUs by the driver's minor numbers, not nvidia-smi's order",
        "GPUStack's detector takes each GPU's index from the driver's minor number (/dev/nvidia<N>) while "
        "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY is on (its default); on this machine those numbers do not "
        "follow nvidia-smi's PCI order, so its GPU indices and nvidia-smi's name different cards"
        + ("; CUDA_DEVICE_ORDER=PCI_BUS_ID orders CUDA's list, not these numbers, so it changed nothing" if tried else ""),
        "start the GPUStack worker with GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=false (its container: docker "
        "run -e GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=false ...; a service: Environment= in its unit), then "
        "redeploy the model; nvidia-smi --query-gpu=index,pci.bus_id --format=csv and nvidia-smi -q | grep Minor show "
        "the two numberings", [ctx.line_fact(lines[0])], lines[:1]))
