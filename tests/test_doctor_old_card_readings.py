"""doctor, round 6 (issue 63): readings about old AMD cards that carry to pastes never seen. A GCN 4 card (gfx803:
Polaris, Fiji) is outside ROCm 6 and 7, but a paste from the ROCm 3/4 years (a ROCm version it names, Ubuntu 16.04)
ran a ROCm that still built it, so the failure there has the reason of its own line: missing code in the published
wheel, the device files, the PCIe atomics. The kernel driver saying it has no entry for the card's device id is the
card outside that driver, whatever /dev/kfd errors follow. Every paste here is written for the test (other cards,
tools and wordings than the mined cases); each reading has a negative that keeps it out of a paste it does not fit."""

from __future__ import annotations

from steadytune.doctor.diagnose import diagnose_text


def _top(text: str):
    top = diagnose_text(text).top
    assert top is not None, f"no diagnosis for:\n{text}"
    return top


# --- HIP refusing the device on an old card under a ROCm of its years: the device files -------------------------

def test_hip_refusing_an_old_card_under_its_own_rocm_is_the_device_files():
    for paste in (
        "vectoradd_hip fails\nhipErrorNoDevice: no ROCm-capable device is detected\nGPU: Radeon R9 Fury X\n"
        "OS: Ubuntu 14.04.5 LTS",
        "Running the HIP samples on an RX 480 (ROCm 2.9)\nerror: 'hipErrorInvalidDevice'(101) at bit_extract.cpp:41",
        "RX 590, ROCm 3.5.1, Linux 4.13.0-45-generic\nhipErrorInvalidDevice when launching the MatrixTranspose sample",
    ):
        top = _top(paste)
        assert top.family == "device-access", (paste, top.family, top.fix)
        assert "video" in top.fix and "usermod" in top.fix, top.fix


def test_hip_refusing_an_old_card_under_rocm_6_is_still_the_card_outside_rocm():
    top = _top("Running the HIP samples on an RX 480 (ROCm 6.2)\nerror: 'hipErrorInvalidDevice'(101) at bit_extract.cpp:41")
    assert top.family == "gpu-unsupported", (top.family, top.fix)


def test_an_index_in_play_keeps_the_device_files_reading_out():
    top = _top("RX 480, ROCm 2.9\nexport HIP_VISIBLE_DEVICES=1\nerror: 'hipErrorInvalidDevice'(101) at bit_extract.cpp:41")
    assert top.family != "device-access", (top.family, top.fix)


# --- missing code on an old card under its own ROCm: the wheel left it out, build for it ---------------------------

def test_missing_code_on_an_old_card_under_its_own_rocm_is_the_wheel_built_without_it():
    for paste in (
        "pip install torch==1.7.1 -f https://download.pytorch.org/whl/rocm3.10/torch_stable.html\n"
        "GPU: Radeon RX 580 (gfx803)\n>>> torch.randn(2, device='cuda')\n"
        "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
        "ROCm 4.2 on an R9 Nano\n\"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\" as "
        "soon as a tensor goes to the GPU",
    ):
        top = _top(paste)
        assert top.family == "arch-missing", (paste, top.family, top.fix)
        assert "PYTORCH_ROCM_ARCH=gfx803" in top.fix, top.fix


def test_missing_code_on_an_old_card_under_rocm_5_is_the_card_outside_rocm():
    top = _top("pip install torch --index-url https://download.pytorch.org/whl/rocm5.4.2\nGPU: Radeon RX 580 (gfx803)\n"
               "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!")
    assert top.family == "gpu-unsupported", (top.family, top.fix)
    assert "PYTORCH_ROCM_ARCH" not in top.fix


# --- an old card not detected under its own ROCm: the PCIe atomics ----------------------------------------------------

def test_an_old_card_not_detected_under_its_own_rocm_is_the_pcie_atomics():
    for paste in (
        "ROCm 2.10 rocminfo only shows the CPU agent\nGPU: Radeon RX 470\nMotherboard: an old Z77 board",
        "ROCm 3.5 下检测不到显卡\n显卡 RX 590",
        "Fresh install of ROCm 4.0, clinfo and rocminfo do not detect my GPU (R9 Fury)",
    ):
        top = _top(paste)
        assert top.family == "platform-bios", (paste, top.family, top.fix)
        assert "atomics" in top.fix, top.fix


def test_a_vega_card_not_detected_under_an_old_rocm_is_not_the_atomics_reading():
    # gfx9 does not need PCIe atomics: the reading is the old GCN cards' only
    top = diagnose_text("ROCm 3.7 rocminfo only shows the CPU agent\nGPU: Radeon VII").top
    assert top is None or "atomics" not in top.fix


def test_an_old_card_not_detected_under_rocm_6_is_the_card_outside_rocm():
    top = _top("ROCm 6.1 rocminfo only shows the CPU agent\nGPU: Radeon RX 470")
    assert top.family == "gpu-unsupported", (top.family, top.fix)


# --- the kernel driver has no entry for the device id ------------------------------------------------------------

def test_kfd_missing_the_device_id_is_the_card_outside_that_driver_before_the_groups():
    paste = ("$ rocminfo\nROCk module is loaded\nUnable to open /dev/kfd read-write: Permission denied\n"
             "user is member of render group\n$ dmesg | grep -i kfd\n[    3.1] kfd kfd: DID 731f is missing in "
             "supported_devices\n[    3.1] kfd kfd: kgd2kfd_probe failed")
    top = _top(paste)
    assert top.family == "gpu-unsupported", (top.family, top.fix)
    assert "supported" in top.fix and "731f" in top.fix, top.fix


def test_kfd_adding_the_device_is_not_the_unlisted_reading():
    paste = ("$ rocminfo\nUnable to open /dev/kfd read-write: Permission denied\n$ dmesg | grep kfd\n"
             "[    3.1] kfd kfd: amdgpu: added device 1002:731f")
    top = _top(paste)
    assert top.family == "device-access", (top.family, top.fix)


# --- a CUDA torch on an AMD card outside every ROCm wheel: DirectML, not the ROCm index -----------------------------

def test_a_cuda_torch_on_an_old_amd_card_gets_directml_not_the_rocm_index():
    paste = ("ComfyUI fails at start:\nFound no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
             "and installed a driver from http://www.nvidia.com/Download/index.aspx\nI have an AMD Radeon RX 480")
    top = _top(paste)
    assert top.family == "torch-build", (top.family, top.fix)
    assert "DirectML" in top.fix and "rocm7" not in top.fix, top.fix


def test_a_cuda_torch_on_a_current_amd_card_gets_the_rocm_index():
    paste = ("ComfyUI fails at start:\nFound no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
             "and installed a driver from http://www.nvidia.com/Download/index.aspx\nI have an AMD Radeon RX 7900 XTX")
    top = _top(paste)
    assert top.family == "torch-build", (top.family, top.fix)
    assert "DirectML" not in top.fix and "rocm" in top.fix, top.fix


# --- a ROCm newer than the last that carried the arch, said anywhere in the paste ----------------------------------

def test_a_rocm_release_after_the_last_one_with_the_arch_gets_that_last_release():
    for paste in (
        "MI50 on ROCm 7.0: rocBLAS error: Cannot read TensileLibrary.dat for GPU arch : gfx906",
        "Radeon VII, ROCm 6.4.1\nrocBLAS error: Could not load gfx906 kernels",
    ):
        top = _top(paste)
        assert top.family == "arch-missing", (paste, top.family, top.fix)
        assert "rocm6.3" in top.fix and "ROCm 6.3" in top.fix, top.fix


def test_a_rocm_release_that_still_carried_the_arch_is_not_told_to_go_back():
    top = _top("MI50 on ROCm 6.2: rocBLAS error: Cannot read TensileLibrary.dat for GPU arch : gfx906")
    assert "ROCm 6.3 (its packages" not in top.fix, top.fix
