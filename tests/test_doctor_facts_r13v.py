"""doctor, round 13: release and hardware tables checked against their primary sources (xformers' CHANGELOG and wheel
workflows, torch's and onnxruntime-gpu's PyPI metadata, Lightning's CHANGELOG, the cloud instances' GPUs)."""

from __future__ import annotations

import pytest

from steadytune.doctor.facts import extract_facts
from steadytune.doctor.rules.install.companion_index import _PYPI_TORCH_CUDA, _XFORMERS_FOR_TORCH
from steadytune.doctor.rules.install.onnxruntime_cuda import ort_build


def gpus(text: str) -> list[tuple[str, str]]:
    return [(f.value, f.detail) for f in extract_facts(text).of("gpu")]


# xformers' CHANGELOG ("Pre-built binary wheels require PyTorch X") and the torch_version of each tag's wheel workflow
@pytest.mark.parametrize("torch, xformers", [("2.0.1", "0.0.22"), ("2.1.0", "0.0.22.post7"), ("2.3.1", "0.0.27"),
                                             ("2.4.1", "0.0.28.post1"), ("2.5.1", "0.0.28.post3"),
                                             ("2.6.0", "0.0.29.post3"), ("2.7.0", "0.0.30")])
def test_xformers_release_for_each_torch(torch, xformers):
    assert _XFORMERS_FOR_TORCH[torch] == xformers


# the nvidia-cuda-runtime-cu1x pin in each torch release's PyPI metadata (Linux x86_64)
@pytest.mark.parametrize("release, tag", [((2, 0), "cu117"), ((2, 1), "cu121"), ((2, 4), "cu121"), ((2, 5), "cu124"),
                                          ((2, 6), "cu124"), ((2, 7), "cu126"), ((2, 8), "cu128"), ((2, 9), "cu128")])
def test_pypi_torch_cuda(release, tag):
    assert _PYPI_TORCH_CUDA[release] == tag


# onnxruntime-gpu 1.21-1.24 on PyPI: the [cuda] extra pins nvidia-*-cu12, the [cudnn] extra nvidia-cudnn-cu12~=9.0
@pytest.mark.parametrize("minor", [21, 22, 23, 24])
def test_onnxruntime_gpu_cuda12_cudnn9(minor):
    assert ort_build((1, minor)) == ("12.x", "9", "9")


# p5 is H100; p5e / p5en are H200; Google's A3 Ultra is H200, A3 High H100
@pytest.mark.parametrize("text, name, arch", [
    ("training on p5.48xlarge", "H100 (p5.48xlarge)", "sm_90"),
    ("training on p5e.48xlarge", "H200 (p5e.48xlarge)", "sm_90"),
    ("endpoint on ml.p5en.48xlarge", "H200 (ml.p5en.48xlarge)", "sm_90"),
    ("node pool of a3-ultragpu-8g", "H200 (a3-ultragpu-8g)", "sm_90"),
    ("node pool of a3-highgpu-8g", "H100 (a3-highgpu-8g)", "sm_90"),
    ("a2-ultragpu-1g VM", "A100 (a2-ultragpu-1g)", "sm_80"),
    ("g4dn.xlarge", "Tesla T4 (g4dn.xlarge)", "sm_75"),
    ("g6e.2xlarge", "L40S (g6e.2xlarge)", "sm_89"),
])
def test_cloud_instance_gpu(text, name, arch):
    assert (name, arch) in gpus(text)
