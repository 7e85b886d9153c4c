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
    # gpu-unsupported: an Intel GPU with a tool that has its own Intel route
    ("deepspeed --num_gpus 1 train.py on an Intel Arc A750 just exits, nothing printed. why?", "gpu-unsupported",
     ["intel-extension-for-deepspeed"]),
    ("Will ollama ever use my Intel Arc A380? It is not supported in the current release", "gpu-unsupported",
     ["Vulkan", "ipex-llm"]),
    # driver: torch's XPU build sees the Intel GPU and crashes calling into it
    ("torch 2.9.1+xpu on an Intel Arc B580, Ubuntu 24.04\ntorch.xpu.device_count() -> 1\n"
     "torch.xpu.mem_get_info(0) -> Segmentation fault (core dumped)", "driver", ["libze-intel-gpu1", "libze1"]),
    # platform-bios: the SMI reading empty sysfs files of cards asleep in runtime power management
    ("$ rocm-smi --showtemp\nExpected integer value from monitor, but got \"\"\nGPU[0] : Temperature (Sensor edge) "
     "(C): N/A   (two MI210 that sat idle overnight)", "platform-bios", ["power/control", "amdgpu.runpm=0"]),
    # device-access: NVML not loadable inside a pod or container started by plain runc
    ("k3s with containerd, nvidia device plugin pod log:\nLoading NVML\nFailed to initialize NVML: could not load "
     "NVML library.\nIf this is a GPU node, did you set the nvidia runtime as default?", "device-access",
     ["--runtime=containerd --set-as-default"]),
    # driver: the NVIDIA container runtime refusing an image whose CUDA needs a newer host driver
    ("docker run --gpus all pytorch/pytorch:2.7.0-cuda12.8-cudnn9-runtime\nnvidia-container-cli: requirement error: "
     "unsatisfied condition: cuda>=12.8, please update your driver to a newer version, or use an earlier cuda "
     "container: unknown. (driver 535, A100)", "driver", ["570 or newer", "older image"]),
    # arch-missing: a CMake default target list that leaves the GPU out
    ("building rocWMMA from source: gfx1030 is not in the default GPU_TARGETS any more, my RX 6800 gets nothing",
     "arch-missing", ['GPU_TARGETS="gfx1030"']),
    ("whisper.cpp CMakeLists sets CMAKE_CUDA_ARCHITECTURES \"60;70;75\", so my GTX 970 (compute capability 5.2) is "
     "left out", "arch-missing", ['CMAKE_CUDA_ARCHITECTURES="52;60;70;75"']),
    # device-access: a ROCm torch (collect_env says so) that finds no GPU, nothing else said
    ("sglang ROCm 6.4 image: RuntimeError: No HIP GPUs are available\nPyTorch version: 2.7.1+git99ccf24\n"
     "ROCM used to build PyTorch: 6.4.43482-0f2d60242\nHIP runtime version: N/A\nIs CUDA available: False",
     "device-access", ["--device /dev/kfd", "render,video"]),
    # wsl: a Windows build printed beside a Linux prompt, GPU compute failing: a preview build, or one too old
    ("C:\\> ver\nMicrosoft Windows [Version 10.0.25267.1000]\nana@LAPTOP-7Q:~$ python -c 'import torch; "
     "print(torch.cuda.is_available())'\nFalse\nRTX 4060 Laptop", "wsl", ["past build 25267", "Insider"]),
    ("Microsoft Windows [Version 10.0.18363.1556]\nme@PC:~$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't "
     "communicate with the NVIDIA driver.", "wsl", ["19044"]),
    # driver: amdgpu-dkms's configure checks all failing on a Debian kernel: the kbuild objtool wrapper
    ("Debian 13, ROCm 6.3.1 amdgpu-dkms on 6.12.9-amd64:\n/var/lib/dkms/amdgpu/6.10.5-2084815.22.04/build/Makefile:"
     "52: *** drm_gem_object->resv is missing. exit....  Stop.", "driver",
     ["/usr/lib/linux-kbuild-6.12.9/tools/objtool", "objtool.real-x86"]),
    # arch-missing: a tool's own "update it" fix names the release after the one the paste says
    ("CUDA error: no kernel image is available for execution on the device\nOllama version: 0.6.8\nGPU: Quadro "
     "M4000 (compute capability 5.2)", "arch-missing", ["update Ollama past 0.6.8 (0.7 or later)"]),
    # driver: Windows' entry-point-not-found exit on an NVIDIA machine
    ("koboldcpp.exe on Windows 10, GeForce GTX 1660: the CUDA runner exits with code 0xc0000139 as soon as a model "
     "loads", "driver", ["current NVIDIA driver"]),
    # driver: a newer release of the tool falls back to the CPU on a named driver branch older than 550
    ("LM Studio 0.3.20: models now run on CPU only; 0.3.14 worked on the GPU. RTX 3090, Driver Version 530.41.03",
     "driver", ["from 530 to 550 or newer"]),
    # wsl: ggml's CUDA backend out of memory under WSL 2: the pinned host buffers
    ("koboldcpp under WSL2 Ubuntu, RTX 4070 12GB, 7B q4 model: CUDA error: out of memory\n  current device: 0, in "
     "function ggml_cuda_host_malloc at ggml-cuda.cu:412", "wsl", ["GGML_CUDA_NO_PINNED=1"]),
    # gpu-unsupported: a ROCm library's sources failing to compile for one target
    ("make -j8 in rocWMMA build/: error: use of undeclared identifier 'ROCWMMA_ARCH_GFX' while compiling for gfx1010",
     "gpu-unsupported", ["not supported by rocWMMA", "GPU_TARGETS"]),
    # gpu-unsupported: a Windows card AMD lists for the HIP runtime only
    ("Windows 11: my RX 6500 XT (gfx1034) runs HIP programs but it is not in the HIP SDK, so no rocBLAS for it?",
     "gpu-unsupported", ["not supported by the Windows HIP SDK"]),
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


def test_an_xpu_torch_out_of_memory_is_not_a_level_zero_mismatch():
    top = diagnose_text("torch 2.9.1+xpu, Arc A770: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY then Segmentation fault").top
    assert top is None or "Level Zero" not in top.title, top.title


def test_an_intel_gpu_with_torch_xpu_working_is_not_told_to_install_xpu():
    top = diagnose_text("Arc A770, torch 2.8.0+xpu: torch.xpu.is_available() True, deepspeed launch stops").top
    assert top is None or "runs neither CUDA nor ROCm" not in top.title, top.title


def test_nvml_missing_on_the_host_is_not_a_container_runtime_reading():
    top = diagnose_text("$ nvidia-smi\nNVIDIA-SMI couldn't find libnvidia-ml.so library in your system. (Ubuntu 22.04, "
                        "RTX 3080, after installing the driver)").top
    assert top is None or "NVIDIA runtime" not in top.title, top.title


def test_an_smi_table_of_n_a_without_idle_or_the_empty_read_is_not_runtime_power():
    top = diagnose_text("root@n1:~# rocm-smi\n0       1     0x744a,   5599   N/A     N/A    N/A, N/A, 0         N/A   "
                        "N/A   0%   unknown  N/A     0%     0%\nafter installing ROCm 6.4 on a new W7900").top
    assert top is None or "runtime power management" not in top.title, top.title


def test_a_build_list_that_includes_the_gpu_is_not_read_as_leaving_it_out():
    top = diagnose_text("cmake -DGPU_TARGETS=gfx1100 -DCMAKE_BUILD_TYPE=Release .. builds fine on my RX 7900 XTX").top
    assert top is None or "default target list" not in top.title, top.title


def test_a_cpu_torch_on_an_amd_gpu_is_still_the_build():
    top = diagnose_text("RX 7900 XTX, torch 2.7.1+cpu\nROCM used to build PyTorch: N/A\nRuntimeError: No HIP GPUs are "
                        "available").top
    assert top is not None and top.family != "device-access", top.title


def test_a_rocm_torch_with_an_override_is_not_read_as_device_access():
    top = diagnose_text("HSA_OVERRIDE_GFX_VERSION=11.0.0 python train.py\nROCM used to build PyTorch: 6.2.41133\n"
                        "RuntimeError: No HIP GPUs are available").top
    assert top is None or "device files" not in top.title, top.title


def test_a_released_windows_build_is_not_blamed():
    top = diagnose_text("Microsoft Windows [Version 10.0.22631.4460]\nme@PC:~$ nvidia-smi\nNVIDIA-SMI has failed "
                        "because it couldn't communicate with the NVIDIA driver.").top
    assert top is None or "build 22631" not in top.title, top.title


def test_a_configure_check_on_an_ubuntu_kernel_is_not_the_debian_wrapper():
    top = diagnose_text("Ubuntu 24.04, kernel 6.11.0-19-generic\nBuilding for 6.11.0-19-generic\n/var/lib/dkms/amdgpu/"
                        "6.3.6/build/Makefile:16: *** dma_resv->seq is missing., exit....").top
    assert top is None or "objtool" not in top.fix, top.fix


def test_entry_point_missing_on_an_amd_machine_is_not_the_nvidia_driver():
    top = diagnose_text("ollama on Windows, Radeon RX 7800 XT: llama runner process has terminated: exit status "
                        "0xc0000139").top
    assert top is None or "NVIDIA driver" not in top.title, top.title


def test_a_new_enough_driver_is_not_blamed_for_a_cpu_fallback():
    top = diagnose_text("Ollama 0.30.1 runs on CPU only; 0.24.0 worked. Driver: NVIDIA 570.133.07, 2x RTX 3090").top
    assert top is None or "too old for the newer release" not in top.title, top.title


def test_a_card_zluda_already_runs_on_is_not_called_unsupported():
    top = diagnose_text("ComfyUI-Zluda with an RX 580 and an RX 6800: it always runs on the wrong card\n"
                        "Device: cuda:0 AMD Radeon RX 580 2048SP [ZLUDA] : native").top
    assert top is None or "ZLUDA does not run" not in top.title, top.title


def test_torch_out_of_memory_under_wsl_is_not_the_pinned_limit():
    top = diagnose_text("WSL2, RTX 3060: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB").top
    assert top is None or "pinned" not in top.title, top.title


def test_a_library_compile_error_without_a_target_is_not_an_unsupported_gpu():
    top = diagnose_text("building rocBLAS 6.2 for gfx1100: error: use of undeclared identifier 'hipblasLtHandle_t' "
                        "in library/src/handle.cpp").top
    assert top is None or "does not support" not in top.title, top.title


def test_the_sdk_remark_on_linux_is_not_the_windows_table():
    top = diagnose_text("Ubuntu 24.04, gfx1032: ROCm runtime works but not the SDK samples").top
    assert top is None or "Windows HIP" not in top.title, top.title
