"""A program that chooses which GPU build of its tools to fetch by what it finds on the machine, given the CUDA build on
an AMD machine: the CUDA toolkit or NVIDIA's utilities are installed there too (nvidia-smi on the path, which then
fails: "couldn't communicate with the NVIDIA driver"), so the program detects CUDA and downloads its CUDA binaries,
which then fail to load CUDA's runtime (libcudart.so.12, libcublas) that an AMD machine has no use for. Installing the
CUDA runtime is not the fix: the AMD build of the tools is, after taking away what misled the detection.

GPUStack is such a program: it fetches its inference binaries (llama-box and others) per device with `gpustack
download-tools --device <cuda|rocm|dcu ...>` (its Dockerfiles run `gpustack download-tools --device cuda` / `--device
dcu`, found by string search in their code). Source: gpustack/gpustack#1238 (an AMD machine with CUDA also installed:
llama-box failed on libcudart.so.12 and nvidia-smi could not reach an NVIDIA driver; the maintainers' summary of the
user's fix: uninstall CUDA and run gpustack download-tools --device rocm)."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _nvidia_gpu, _text, _vendor, rule

_CUDA_RUNTIME = re.compile(r"(?i)\b(libcudart\.so(?:\.\d+)*|libcublas(?:Lt)?\.so(?:\.\d+)*|cudart64_\d+\.dll|"
                           r"cublas64_\d+\.dll)\b[^\n]{0,80}(?:cannot open shared object|not found|no such file|"
                           r"could not be found|not loaded)")
_NO_NVIDIA_DRIVER = re.compile(r"(?i)couldn't communicate with the NVIDIA driver|NVIDIA-SMI has failed|"
                               r"Found no NVIDIA driver|no NVIDIA GPU|nvidia-smi[^\n]{0,40}(?:failed|return code: 9)")


@rule("torch-build")
def cuda_tools_fetched_on_amd(ctx: Context) -> Optional[Diagnosis]:
    """Decided by: an AMD machine with no NVIDIA GPU, CUDA's runtime library missing for a program's own binary, and
    NVIDIA's utilities present but finding no NVIDIA driver (what misled the program's detection)."""
    if _vendor(ctx) != "amd" or _nvidia_gpu(ctx):
        return None
    lines = _lines_matching(ctx, _CUDA_RUNTIME)
    misled = _lines_matching(ctx, _NO_NVIDIA_DRIVER)
    if not lines or not misled:
        return None
    text = _text(ctx)
    gpustack = bool(re.search(r"(?i)\bgpustack\b", text))
    fetch = ("fetch GPUStack's ROCm tools: gpustack download-tools --device rocm (then restart GPUStack; in a "
             "container: the ROCm image of GPUStack instead of the CUDA one)" if gpustack else
             "install the program's ROCm build (its AMD / ROCm download, image or install option) in place of the "
             "CUDA one")
    return _first(_make(
        "torch-build", "the CUDA build of the program's tools was fetched on an AMD machine",
        "the program picks the GPU build of its tools by what it finds installed: CUDA's toolkit or nvidia-smi on this "
        "AMD machine made it take the CUDA build, whose binaries need CUDA's runtime and an NVIDIA GPU",
        "remove what misleads the detection (the CUDA toolkit / NVIDIA utilities on this AMD machine: sudo apt purge "
        "'cuda-*' 'nvidia-*', or at least take them off the PATH), then " + fetch,
        [ctx.line_fact(lines[0])], lines[:1] + misled[:1]))
