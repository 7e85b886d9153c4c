"""doctor, round 11 (issue 63): readings of the driver, override-wrong and apu-memory families. Each paste is written
for its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep
each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the container runtime refusing an image built on a CUDA 10 release: the driver table's CUDA 10 rows
    ("docker compose up\nError response from daemon: failed to create task for container: nvidia-container-cli: "
     "requirement error: unsatisfied condition: cuda>=10.1, please update your driver to a newer version",
     "driver", ["418 or newer", "CUDA 10.1"]),
    # an NGC image's own entrypoint check (another image, release and card), the detected version on the next line
    ("docker run --gpus all -it nvcr.io/nvidia/pytorch:23.12-py3 on my RTX 4090 box\nERROR: This container was built "
     "for NVIDIA Driver Release 545.23 or later, but\n       version 535.129.03 was detected and compatibility mode "
     "is UNAVAILABLE.", "driver", ["545.23 or later", "nvidia-driver-545"]),
    # ROCr rejecting an empty override (docker -e with no value) on another card
    ("docker run -it --device /dev/kfd --device /dev/dri -e HSA_OVERRIDE_GFX_VERSION= rocm/dev-ubuntu-24.04 rocminfo\n"
     "Invalid HSA_OVERRIDE_GFX_VERSION format expected \"1.2.3\"\nRX 7900 GRE", "override-wrong",
     ["unset HSA_OVERRIDE_GFX_VERSION", "remove the entry"]),
    # the same with the value left blank in a pod spec, seen as gfx000 alone (no GPU target beside it)
    ("pod spec:\n  env:\n    - name: HSA_OVERRIDE_GFX_VERSION\n      value: \"\"\n$ rocm_agent_enumerator\ngfx000\n"
     "gfx000\nvllm finds no GPU in the pod", "override-wrong", ["unset HSA_OVERRIDE_GFX_VERSION"]),
    # a built-in amdgpu (said with the kernel option) and rocminfo's module check
    ("Gentoo with a custom kernel, CONFIG_DRM_AMDGPU=y, RX 6800\n$ rocminfo\nROCk module is NOT loaded, possibly no GPU "
     "devices\nbut /dev/kfd is there and rocm-smi shows the card", "driver",
     ["built-in amdgpu", "rocminfo", "CONFIG_DRM_AMDGPU=m"]),
    # amdgpu-dkms of an older ROCm on a mainline 6.14 kernel: the release table's first build for it
    ("ROCm 6.3.3 (amdgpu-dkms) on Ubuntu 24.04, RX 7600, kernel 6.14.2-061402-generic from the mainline PPA\n"
     "Error! Bad return status for module build on kernel: 6.14.2-061402-generic (x86_64)", "driver",
     ["linux-generic-hwe-24.04", "amdgpu-dkms of ROCm 6.4.2"]),
    # a mainline kernel whose amdgpu crashes when loaded (another Ubuntu, another card): its GA kernel named
    ("Ubuntu 20.04, RX 580, kernel 5.10.0-051000-generic\nsudo modprobe amdgpu freezes the whole machine, I have to "
     "hold the power button", "driver", ["linux-generic-hwe-20.04", "GA 5.4 kernel"]),
    # a version mismatch that a reboot did not clear (another distribution and branch): the stale library links
    ("Rocky Linux 9, dnf update pulled driver 550.127\n$ nvidia-smi\nFailed to initialize NVML: Driver/library version "
     "mismatch\nrebooted twice already", "driver", ["reboot", "libnvidia-ml.so"]),
    # Error 803 in a container (docker instead of podman, another image and host branch): the image's compat libcuda
    ("docker run --rm --gpus all my-registry/trainer:cuda12.4 python -c 'import torch; torch.zeros(1).cuda()'\n"
     "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has unsupported display driver / "
     "cuda driver combination\nhost: Driver Version: 575.57.08", "driver", ["/usr/local/cuda/compat", "ldconfig"]),
    # an APU's out-of-memory said in words on Linux (another APU, tool): the minimum carve-out and the GTT
    ("Fedora 41 laptop with a Radeon 890M: whisper.cpp built with HIP keeps giving out of memory errors on the large "
     "model", "apu-memory", ["512 MB", "ttm.pages_limit"]),
    # Strix Halo named as "AI Max" without Ryzen, a tool seeing a fraction of the carve-out
    ("My AI Max+ 390 mini PC with ROCm 6.4.1: I set VRAM to 64GB in the BIOS but it only shows 15.5 GiB in "
     "llama.cpp", "apu-memory", ["GTT"]),
    # the same said of Ollama: also its own iGPU sizing (update it)
    ("Ollama 0.12.3 on a Ryzen AI Max+ 395 with 128GB, Ubuntu 24.04: I set the VRAM to 96GB but ollama only finds "
     "15.5 GiB", "apu-memory", ["GTT", "update Ollama"]),
    # a Windows ROCm release installed beside an older Adrenalin (another card, app and older driver)
    ("Windows 11, RX 7800 XT, AMD Software Adrenalin 25.10.2\nI installed ROCm 7.1.1 for Windows and now Amuse "
     "stopped working", "driver", ["Adrenalin Edition 26.1.1"]),
    # a named Adrenalin release after which an app's ROCm runtime loses the GPU (another app, card and release)
    ("Windows 10, RX 7600, Adrenalin 26.2.1\nkoboldcpp's ROCm backend: the GPU is missing from the list and it shows "
     "no VRAM; removing the ROCm backend folder makes it start again", "driver", ["26.2.1", "Vulkan"]),
    # an override in a compose file, the GPU under it not named
    ("docker-compose.yml\n  ollama:\n    environment:\n      - HSA_OVERRIDE_GFX_VERSION=11.0.0\nsince I moved the "
     "stack to the new server ollama has problems loading any model", "override-wrong",
     ["remove HSA_OVERRIDE_GFX_VERSION", "rocminfo | grep gfx"]),
    # HIP's own no-device words from a user's program right after the install (another card, distribution)
    ("Fedora 42, RX 7700 XT, just installed rocm-hip-devel\n$ ./hello_hip\nhipGetDeviceCount failed: no ROCm-capable "
     "device is detected", "driver", ["reboot", "render,video"]),
    # the APU MES hang (another APU, tool): AMD's driver with its own firmware as the other way out
    ("Radeon 880M (gfx1150), ROCm 7.1.1, Ubuntu 24.04: hipcc-built test program hangs at the first kernel launch, "
     "the CPU path works", "driver", ["amdgpu-dkms-firmware"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # amdgpu said NOT to be built in: not the built-in reading
    ("amdgpu is not built into the kernel here\nrocminfo\nROCk module is NOT loaded, possibly no GPU devices",
     "CONFIG_DRM_AMDGPU=m"),
    # a valid override on its own family with another failure: not ROCr's rejection
    ("HSA_OVERRIDE_GFX_VERSION=10.3.0 ollama serve\nRX 6600 XT\nCUDA error: out of memory", "rather than leave it empty"),
    # gfx000 beside a real target (the CPU agent), no override: not the rejected-override reading
    ("$ rocm_agent_enumerator\ngfx000\ngfx1030\npytorch hangs on the first matmul", "rather than leave it empty"),
    # HIP finding no device in a container: the device files, not a reboot
    ("docker run -it rocm/dev-ubuntu-22.04 ./hello_hip\nno ROCm-capable device is detected\nRX 7900 XTX",
     "reboot once after installing ROCm"),
    # an override in a deployment for the GPU it suits, named: not the leftover reading
    ("kubernetes deployment for ollama on an RX 6750 XT\n        - name: HSA_OVERRIDE_GFX_VERSION\n          value: "
     "\"10.3.0\"\nit has problems with long prompts", "any library pin left with it"),
    # an APU running out of memory on Windows: the carve-out there, not the Linux GTT advice
    ("Windows 11, Radeon 780M laptop: LM Studio gives out of memory errors loading a 14B model", "minimum (512"),
    # out of memory on an APU machine said to have less than 128 GB: the model against the machine, not the split
    ("Ryzen AI Max 385 with 32GB, Fedora: llama-server says out of memory loading a 70B Q4 model", "minimum (512"),
    # an Adrenalin as new as the table's row: not "update to it"
    ("Windows 11, RX 9070 XT, Adrenalin 26.1.1, ROCm 7.1.1: ComfyUI crashes on the VAE decode",
     "Adrenalin Edition 26.1.1 or later"),
    # a ROCm whose amdgpu-dkms already builds for the mainline kernel's series: not the release-table advice
    ("ROCm 6.4.3 amdgpu-dkms on 6.14.0-061400-generic\nError! Bad return status for module build on kernel: "
     "6.14.0-061400-generic (x86_64)", "keep this kernel and install the amdgpu-dkms"),
    # Error 803 outside any container: not the image's compat library
    ("python -c 'import torch; torch.cuda.init()'\nError 803: system has unsupported display driver / cuda driver "
     "combination\nUbuntu 22.04, RTX 3060, driver 535", "/usr/local/cuda/compat in /etc/ld.so.conf.d"),
    # amdgpu crashing on the distribution's own kernel: not the mainline reading
    ("Ubuntu 18.04, kernel 4.15.0-45-generic: sudo modprobe amdgpu crashes the machine, Vega 56",
     "instead of the mainline one"),
    # an NGC image that started and failed otherwise: not the entrypoint's driver check
    ("nvcr.io/nvidia/pytorch:24.05-py3 on an A100\nRuntimeError: CUDA error: out of memory", "NGC Frameworks Support"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
