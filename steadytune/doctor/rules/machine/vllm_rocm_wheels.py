"""vLLM's PyPI wheel on an AMD machine: it is a CUDA build that brings a CUDA torch, so it finds
no NVIDIA driver there. vLLM's install page: AMD's docker image, or a build from source against a ROCm torch.
Split out of app_pages.py in round 18."""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _vendor, rule


# (an index or a wheel named for ROCm, or a source checkout, is AMD's own build)
_PIP_VLLM = re.compile(r"(?i)\b(?:uv )?pip3? install\b[^\n]*\bvllm\b(?![^\n]*(?:/rocm|\+rocm|-rocm|--no-build-isolation|"
                       r"-e \.))")
_CUDA_ON_AMD = re.compile(r"(?i)libcuda\.so|Failed to infer device type|No CUDA GPUs|NVIDIA driver|nvidia-smi|"
                          r"libcudart|CUDA driver|torch\.cuda\.is_available\(\)[^\n]{0,20}False|\+cu1\d\d")


@rule("torch-build")
def vllm_pypi_wheel_on_amd(ctx: Context) -> Optional[Diagnosis]:
    """vLLM's install page: the wheels on PyPI are built for CUDA (and pull a CUDA torch); on ROCm vLLM comes from
    AMD's docker image or a build from source against a ROCm torch."""
    if "vllm" not in ctx.sheet.tools or _vendor(ctx) != "amd":
        return None
    if any(a.startswith("sm_") for a in ctx.sheet.machine_archs):
        return None
    said = _lines_matching(ctx, _PIP_VLLM)
    symptom = _lines_matching(ctx, _CUDA_ON_AMD)
    if not said or not symptom:
        return None
    archs = [a for a in ctx.sheet.machine_archs if a.startswith("gfx")]
    arch = archs[0] if archs else "<gfx arch from rocminfo>"
    return _first(_make(
        "torch-build", "vLLM's PyPI wheel is a CUDA build, on an AMD GPU",
        "pip install vllm takes the wheel from PyPI, which is built for CUDA and brings a CUDA torch; on a ROCm machine "
        "it finds no NVIDIA driver (libcuda.so, no CUDA GPUs, no device type)",
        "use AMD's build: docker pull rocm/vllm:latest and run it with --device /dev/kfd --device /dev/dri "
        "--group-add video --ipc=host --shm-size 16G; or build vLLM from source against a ROCm torch in a fresh "
        "environment: pip install torch --index-url https://download.pytorch.org/whl/rocm6.4, then in the vllm "
        f"checkout pip install -r requirements/rocm.txt and PYTORCH_ROCM_ARCH={arch} python setup.py develop",
        said[:1] + symptom[:1], said[:1] + symptom[:1]))
