"""KFD refusing to build a GPU address space for a process ("Failed to create process VM object" in dmesg, the runtime
answering HSA_STATUS_ERROR_OUT_OF_RESOURCES): the device node opened, so the user's groups are not the cause; the
KFD of a current ROCm / kernel does this for GCN GPUs older than gfx9 (gfx7 Hawaii / Grenada, gfx8 Fiji / Polaris),
which every ROCm 6 and 7 release leaves out (arch/old_gcn.py)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.arch.old_gcn import _gcn_generation
from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, rule

# kfd_process.c's message when the process's GPU VM cannot be acquired
VM_REFUSED = r"(?i)Failed to create process VM object|Failed to create process device data"


@rule("gpu-unsupported")
def kfd_refuses_process_vm(ctx: Context) -> Optional[Diagnosis]:
    refused = _lines_matching(ctx, VM_REFUSED)
    if not refused:
        return None
    arch, fact = ctx.arch()
    generation = _gcn_generation(arch)
    if arch and not generation:
        return None   # a gfx9+ GPU named: another cause (memory, a kernel bug), not the GPU's age
    said = f"{arch}, {generation}" if generation else "an older GCN GPU: gfx7 Hawaii / Grenada or gfx8 Fiji / Polaris"
    runtime = _lines_matching(ctx, r"OUT_OF_RESOURCES|hsa api call failure|hipErrorNoDevice")
    return _make("gpu-unsupported", "the kernel's KFD cannot give a process this GPU",
                 f"the device files opened (the groups are not the cause): KFD then failed to create the process's GPU "
                 f"address space, which it does for GPUs the installed ROCm no longer supports ({said}); current ROCm "
                 "(6.x, 7.x) runs on gfx9 and newer only",
                 "check the GPU: rocminfo | grep gfx or lspci -nn | grep -i vga; on gfx7 / gfx8 use a ROCm release of "
                 "that GPU's era in a container (the last one that listed it), or the Vulkan / OpenCL (Mesa rusticl, "
                 "Clover) backends of the tool; on a gfx9+ GPU read the lines around it: sudo dmesg | grep -i -e kfd "
                 "-e amdgpu", [fact] if fact else [], refused + runtime[:2], confirmed=bool(generation))
