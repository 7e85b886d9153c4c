"""doctor: the release tables checked against their sources in round 13 (issue 63): TensorFlow 2.20/2.21 (CUDA 12.5,
cuDNN 9.3), PaddlePaddle 2.5/2.6 (a CUDA 11.8 build, PyPI's wheel is that build, 2.6's per-CUDA package index), and a
CUDA 10 library, which no pip wheel carries."""

from __future__ import annotations

from steadytune.doctor.diagnose import diagnose_text
from steadytune.doctor.rules.install.framework_cuda_builds import TF_BUILDS, _paddle_install, _pypi_cuda


def _fixes(paste: str) -> str:
    report = diagnose_text(paste)
    return " ".join(d.fix for d in report.diagnoses)


def test_tensorflow_2_20_and_2_21_are_cuda_12_5_builds():
    assert TF_BUILDS[(2, 20)] == TF_BUILDS[(2, 21)] == ("12.5", "9.3")


def test_pypi_paddle_wheel_is_cuda_10_2_until_2_4_then_11_8():
    assert _pypi_cuda((2, 4)) == "10.2"
    assert _pypi_cuda((2, 5)) == _pypi_cuda((2, 6)) == "11.8"


def test_paddle_install_commands_per_release():
    assert _paddle_install((2, 5), "2", "11.8", False) == \
        "pip install paddlepaddle-gpu==2.5.2 (PyPI's is the CUDA 11.8 build)"
    assert "2.4.2.post118" not in _paddle_install((2, 4), "2", "11.7", False)
    assert _paddle_install((2, 4), "2", "10.2", False).startswith("pip install paddlepaddle-gpu==2.4.2 (PyPI")
    assert _paddle_install((2, 6), "1", "12.0", False) == (
        "pip install paddlepaddle-gpu==2.6.1.post120 -i https://www.paddlepaddle.org.cn/packages/stable/cu120/")
    assert "whl/windows/mkl/avx/stable.html" in _paddle_install((2, 5), "1", "12.0", True)


def test_paddle_2_6_on_cuda_12_gets_its_cuda_12_build():
    fixes = _fixes("paddlepaddle-gpu 2.6.1\nCUDA version: 12.0\nOSError: libcudart.so.11.0: cannot open shared object "
                   "file: No such file or directory\n")
    assert "paddlepaddle-gpu==2.6.1.post120" in fixes
    assert "packages/stable/cu120/" in fixes


def test_a_cuda_10_library_is_the_cuda_10_toolkit_not_a_cudnn_wheel():
    fixes = _fixes("python run.py\nImportError: libcublas.so.10.0: cannot open shared object file: No such file or "
                   "directory\n")
    assert "nvidia-cudnn" not in fixes
    assert "CUDA 10.0 toolkit" in fixes or "cuda-10.0" in fixes or "CUDA 10.0" in fixes
