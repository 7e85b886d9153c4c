"""doctor, round 8 (issue 63): readings for the driver, device-access, platform, arch and GPU-support families that
carry to pastes doctor has never seen. Each paste is written for the reading (another GPU, tool, wording or value than
the mined case it came from); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text

# (paste, family, phrases the fix must say)
READINGS = [
    # device-access: docker's --gpus refused, in the older wording without the driver's name in quotes
    ("docker run --rm --gpus all nvcr.io/nvidia/pytorch:24.05-py3 nvidia-smi\ndocker: Error response from daemon: "
     "could not select device driver with capabilities: [[gpu]]. (RTX A4000)", "device-access",
     ["nvidia-ctk runtime configure", "restart docker"]),
    # driver: amdgpu-dkms failing on a kernel newer than the release lists
    ("amdgpu-dkms fails to build on kernel 6.14 (ROCm 6.3.3, Fedora 42)\nError! Bad return status for module build "
     "on kernel: 6.14.2-300.fc42.x86_64 (x86_64)", "driver", ["supported kernel", "--no-dkms"]),
    # driver: a crash in a program's Vulkan backend, Mesa named
    ("llama-cli with the Vulkan backend segfaults in ggml_vulkan pipeline compile on an RX 6600, Mesa 24.2.8 (Fedora)",
     "driver", ["Mesa past 24.2.8", "driver"]),
    ("LM Studio Vulkan runtime: crashes instantly when loading gemma-3 on Windows 11 (RX 7600)", "driver",
     ["AMD Software Adrenalin", "Mesa"]),
]


@pytest.mark.parametrize("paste, family, phrases", READINGS, ids=[r[0][:40] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    top = diagnose_text(paste).top
    assert top is not None, paste
    assert top.family == family, (top.family, top.title, top.fix)
    for phrase in phrases:
        assert phrase.lower() in top.fix.lower(), (phrase, top.fix)


def test_a_vulkan_out_of_memory_is_not_a_driver_crash():
    top = diagnose_text("llama.cpp Vulkan backend crashes: ggml_vulkan: Device memory allocation of size 4294967296 "
                        "failed. vk::Device::allocateMemory: ErrorOutOfDeviceMemory (RX 6600 8GB)").top
    assert top is None or "Vulkan driver crashes" not in top.title, top.title


def test_a_crash_without_the_vulkan_backend_is_not_read_as_a_vulkan_driver_bug():
    top = diagnose_text("llama-server built with -DGGML_HIP=ON crashes with a segmentation fault on an RX 7900 XTX").top
    assert top is None or "Vulkan" not in top.title, top.title
