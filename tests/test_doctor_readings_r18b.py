"""doctor, round 18 (r18b): readings for missed training cases of PTX refused by an older NVIDIA driver (the exact
oldest driver, the last update of the driver's CUDA, numba's own words, TGI's images), repo.radeon.com 404s while
amdgpu-install runs (a stale ROCm-named repository, an unpublished driver repository), Ollama's CUDA 12 runner on
driver 525, HIP's 'entry point not found' on Windows, CUDA error 999 said in prose (nvidia_uvm), NixOS kernels older
than the ROCm runtime, RCCL's invalid device pointer under an old host amdgpu driver, amdgpu ring timeouts that
freeze the machine under compute, podman 5.5's CDI spec directory, udocker containers without the host driver, and
installers that refuse a toolkit newer than the driver. Each paste is written for its reading (another GPU, tool,
version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not
fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a CuPy kernel refused by driver 470 (ISA 7.5 is CUDA 11.5): the exact oldest driver of CUDA 11.5
    ("cupy.cuda.driver.CUDADriverError: CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an "
     "unsupported toolchain.\nptxas application ptx input, line 5; fatal   : Unsupported .version 7.5; current "
     "version is '7.4'\nGPU: Tesla T4, Driver Version: 470.82.01", "driver", ["495.29.05", "11.4.4"]),
    # numba tests on a laptop: a PTX version mismatch said in words, the toolkit in a "CUDA Toolkit:" line
    ("numba.cuda tests fail: PTX version mismatch while linking\nRTX 4060 Laptop, Driver Version: 535.183.01\n"
     "CUDA Toolkit: 12.6 (conda-forge)", "driver", ["560.28.03", "cuda-version=12.2"]),
    # text-generation-launcher on a V100 with driver 470
    ("text-generation-launcher --model-id bigscience/bloom-560m\nRuntimeError: CUDA error: the provided PTX was "
     "compiled with an unsupported toolchain.\n| NVIDIA-SMI 470.199.02   Driver Version: 470.199.02   CUDA Version: "
     "11.4 |\nTesla V100-SXM2-16GB", "driver", ["CUDA 11.8", "nvidia-driver-520"]),
    # a ROCm-named amdgpu repository on jammy after moving to the new installer
    ("sudo apt update\nErr:4 https://repo.radeon.com/amdgpu/7.1/ubuntu jammy Release\n  404  Not Found [IP: "
     "104.86.1.2 443]\nE: The repository 'https://repo.radeon.com/amdgpu/7.1/ubuntu jammy Release' does not have a "
     "Release file.", "driver", ["--rocmrelease=all", "apt purge amdgpu-install", "autoremove"]),
    # an unpublished driver repository of another point release
    ("After installing amdgpu-install for ROCm 7.3.1, apt update fails:\nErr:3 https://repo.radeon.com/amdgpu/"
     "30.40.1/ubuntu noble Release\n  404  Not Found", "driver", ["30.40.0", "quick-start"]),
    # ollama's v12 runner on driver 520 answering garbage
    ("ollama 0.3.8 in docker, GTX 1080 Ti\nDriver Version: 520.61.05\nthe cuda_v12 runner gives gibberish answers, "
     "OLLAMA_LLM_LIBRARY=cuda_v11 is fine", "driver", ["cuda_v11", "6620"]),
    # ZLUDA on an RX 6600 with an old Adrenalin, the bare dialog
    ("Windows 10, RX 6600\nrunning zluda.exe -- python main.py\nEntry Point Not Found\nthe app closes right after",
     "driver", ["Adrenalin", "amdhip64"]),
    # CUDA error 999 said in prose for a systemd service (a vLLM server)
    ("my vllm.service on Ubuntu 24.04 (RTX 4090) stopped using CUDA after a reboot, the journal shows error 999, "
     "nvidia-smi works fine", "driver", ["modprobe nvidia_uvm", "systemctl daemon-reload"]),
    # NixOS with the 6.6 LTS kernel and a ROCm PyTorch that sees no GPU
    ("NixOS 24.11, Linux 6.6.52, RX 7800 XT\nnix shell nixpkgs#hashcat\nhashcat -I\n"
     "hipInit(): no ROCm-capable device is detected", "driver", ["boot.kernelPackages = pkgs.linuxPackages_latest"]),
    # two Radeon PRO W7900 under DDP in a container with ROCm 6.1, invalid device pointer
    ("torchrun --nproc_per_node=2 train.py\nGPUs: 2x AMD Radeon PRO W7900, ROCm 6.1 in the rocm/pytorch container\n"
     "RuntimeError: HIP error: invalid device pointer", "driver", ["amdgpu-dkms", "host"]),
    # a 7800 XT freezing the whole machine in kohya training
    ("kohya_ss LoRA training on RX 7800 XT, Fedora 40, ROCm 6.2\nthe entire system freezes, dmesg from ssh:\n"
     "amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=4471, emitted seq=4473\nonly the reset "
     "button helps", "gpu-hang", ["power plan", "power limit", "--setprofile"]),
    # podman 5.6 on Fedora after an update
    ("after upgrading podman to 5.6.0 on Fedora 42:\npodman run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi\n"
     "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", "device-access",
     ["--cdi-spec-dir", "5.4.1"]),
    # udocker on Colab with another image
    ("!udocker run --volume=/content:/data vllm/vllm-openai --model facebook/opt-125m\nRuntimeError: CUDA driver "
     "version is insufficient for CUDA runtime version", "driver", ["udocker setup --nvidia", "manylinux"]),
    # an installer refusing a toolkit newer than the driver, another CUDA
    ("setup: CUDA Toolkit 12.8 is installed but INCOMPATIBLE with your driver\nDriver 551.86, Windows 11",
     "driver", ["570", "12.8"]),
]

NEGATIVES = [
    # a PTX refusal whose driver already runs a CUDA without a table entry: no invented exact version
    ("CUDA error: the provided PTX was compiled with an unsupported toolchain.\nDriver Version: 560.35.03 CUDA "
     "Version: 12.6\nCUDA toolkit 12.9", "575.51"),
    # a 404 of an interim Ubuntu that AMD never served: not the stale-repository reading
    ("Err:5 https://repo.radeon.com/amdgpu/6.4/ubuntu oracular Release\n  404  Not Found", "--rocmrelease=all"),
    # the rocm apt tree 404ing: not an amdgpu repository
    ("Err:7 https://repo.radeon.com/rocm/apt/7.9 noble Release\n  404  Not Found", "apt purge amdgpu-install"),
    # ollama's v12 runner on a new driver: no v11 advice
    ("ollama 0.3.8\nDriver Version: 550.54.14\ncuda_v12 crashes with illegal memory access", "OLLAMA_LLM_LIBRARY=cuda_v11"),
    # a named rocBLAS entry point in a copied-in library: not the driver reading
    ("Windows 11\nThe procedure entry point rocblas_gemm_ex3 could not be located in the dynamic link library "
     "rocblas.dll", "Adrenalin Edition, a current release"),
    # error 999 on Windows: not the Linux module
    ("Windows 11, RTX 3070\nCUDA error 999 when starting the app", "modprobe nvidia_uvm"),
    # a HIP failure on Ubuntu: not the NixOS kernel option
    ("Ubuntu 22.04, kernel 6.1.0\nhipInit: Invalid device", "boot.kernelPackages"),
    # invalid device pointer on a single NVIDIA GPU: not the amdgpu reading
    ("RTX 3090, torch 2.3\nRuntimeError: CUDA error: invalid device pointer", "amdgpu-dkms"),
    # a ring timeout without the machine freezing: not the power reading
    ("amdgpu: ring gfx_0.0.0 timeout, signaled seq=10, emitted seq=12\nGPU reset begin!\nthe app crashed, the "
     "desktop stayed up", "--setpoweroverdrive"),
    # podman 5.5 with an unresolvable AMD device: not the NVIDIA spec-dir reading
    ("podman 5.5.2\nError: setting up CDI devices: unresolvable CDI devices amd.com/gpu=all", "--cdi-spec-dir=/run/cdi"),
    # docker (not udocker) with an old driver: not the udocker reading
    ("docker run --gpus all vllm/vllm-openai\nCUDA driver version is insufficient for CUDA runtime version",
     "udocker setup"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
