"""A GPU whose name comes back empty: HIP, rocminfo and torch read an AMD GPU's marketing name from libdrm's table
amdgpu.ids by its PCI device id; where the table is not installed (ROCm base images without libdrm-amdgpu-common)
or predates the GPU, the name is empty while the GPU itself works."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _lines_matching, _make, _text, _vendor, rule

# the name asked for and given back empty, in a program's words or the user's: hipDeviceGetName / hipGetDeviceProperties
# (prop.name), torch.cuda.get_device_name(), rocminfo's "Marketing Name:" with nothing after it (read line by line)
_EMPTY_NAME = re.compile(
    r"(?i)\b(?:hipDeviceGetName|get_device_name|device ?name|gpu ?name|marketing ?name|prop\.name|card series)\b"
    r"[^\n]{0,60}?\b(?:empty|blank|nothing|missing)\b|"
    r"\b(?:empty|blank) (?:device|gpu|marketing) name\b|"
    r"^\s*Marketing Name:\s*$|get_device_name\(\d?\)\W{0,6}(?:''|\"\")")
# an AMD machine: a HIP call, ROCm, an AMD card (the table is AMD's)
_AMD_WORDS = re.compile(r"(?i)\bhip\w*|\brocm\b|\bamd\b|\bradeon\b|\binstinct\b|\bmi\d{3}\w*|\bgfx\d{3,4}")


@rule("rocm-libs-missing")
def gpu_name_left_empty(ctx: Context) -> Optional[Diagnosis]:
    """The GPU's name is empty on an AMD machine, with no error of another family: libdrm's amdgpu.ids is missing
    (or has no row for this device id), so the name lookup finds nothing."""
    lines = _lines_matching(ctx, _EMPTY_NAME.pattern)
    text = _text(ctx)
    if not lines or not (_vendor(ctx) == "amd" or _AMD_WORDS.search(text)):
        return None
    if any(e.family not in (None, "rocm-libs-missing") for e in ctx.errors):
        return None
    container = re.search(r"(?i)\bdocker\b|\bcontainer\b|\bpodman\b|\bimage\b", text)
    return _make("rocm-libs-missing", "libdrm's amdgpu.ids has no name for this GPU",
                 "HIP (hipDeviceGetName, device properties), rocminfo and torch take an AMD GPU's name from libdrm's "
                 "table amdgpu.ids, looked up by the GPU's PCI device id; "
                 + ("this container image does not install the table (its libdrm-amdgpu-common package is missing)"
                    if container else "the table is not installed, or is older than this GPU")
                 + ", so the name comes back empty while the GPU itself works",
                 "install libdrm-amdgpu-common (sudo apt install libdrm-amdgpu-common from AMD's amdgpu-install "
                 "repository; dnf on RHEL/SUSE) so /opt/amdgpu/share/libdrm/amdgpu.ids exists"
                 + (" in the image (a line in its Dockerfile), or use a newer ROCm image that ships it" if container
                    else "")
                 + "; for a GPU newer than the table, append its row to amdgpu.ids (\"<PCI device id>, <revision>, "
                 "<name>\", the id from lspci -nn) or update libdrm", [], lines[:1], confirmed=False)
