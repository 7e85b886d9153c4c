"""doctor, round 16 (r16b): readings for missed training cases of what WSL 2 and GPU-PV guests cannot do (CUDA-OpenGL
interop, RAPIDS on Pascal, a guest without the host's D3D12 libraries), containers (enroot without
NVIDIA_VISIBLE_DEVICES, the docker snap's nvidia runtime, --gpus falling to the AMD CDI driver), the loader (the CUDA
stub libcuda, TheRock's wheel libraries beside a torch built elsewhere, system libraries of slim images), packages
(a renamed ROCm package, requirements that replace torch under xformers, SD.Next's backend after the first install),
a conda toolkit newer than the driver's PTX, and the WanVideo wrapper's own memory nodes. Each paste is written for its
reading (another GPU, tool, version or wording than the mined case); the negatives keep each reading out of pastes it
does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Vulkan interop (driver API) under WSL, refused: the platform has no graphics interop
    ("Ubuntu 22.04 on WSL2, RTX 3070\nmy viewer calls cuGraphicsGLRegisterBuffer and it fails with "
     "CUDA_ERROR_NOT_SUPPORTED", "wsl", ["interop", "cpu()"]),
    # cuML on a GTX 1070 under WSL: Pascal
    ("WSL2 Ubuntu 22.04, GeForce GTX 1070\nimport cuml\nMemoryError: std::bad_alloc: CUDA error at: "
     "rmm/mr/device/cuda_memory_resource.hpp:60: cudaErrorNotSupported operation not supported", "wsl",
     ["Pascal", "7.0"]),
    # a Hyper-V VM given the GPU by GPU-PV scripts: the D3D12 libraries
    ("Hyper-V VM with GPU-PV, dxgkrnl module built with dkms\n$ nvidia-smi\nFailed to initialize NVML: GPU access "
     "blocked by the operating system", "wsl", ["libd3d12core.so", "C:\\Program Files\\WSL\\lib"]),
    # enroot started by hand (not pyxis), CUDA's own words
    ("enroot import docker://python:3.11-slim\nenroot start --rw python+3.11-slim\n>>> torch.cuda.is_available() "
     "returns False\nRuntimeError: No CUDA GPUs are available", "env-not-applied",
     ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]),
    # the docker snap, shown by its paths: snap refresh
    ("docker is at /snap/bin/docker\n$ docker run --rm --runtime=nvidia nvidia/cuda:12.4.1-base-ubuntu22.04 "
     "nvidia-smi\ndocker: Error response from daemon: unknown or invalid runtime name: nvidia.", "device-access",
     ["snap refresh docker"]),
    # --gpus on a GeForce host, compose: the nvidia runtime named
    ("docker compose up\nError response from daemon: AMD CDI spec not found\nhost: Debian 13, GeForce RTX 4070, "
     "driver 570", "device-access", ["--runtime=nvidia", "NVIDIA_VISIBLE_DEVICES=all"]),
    # the same on a Radeon host: the AMD spec generated
    ("docker run --gpus all rocm/pytorch\ndocker: Error response from daemon: AMD CDI spec not found\nRadeon RX "
     "7900 XTX", "device-access", ["amd-ctk cdi generate"]),
    # CuPy's PTX refused, driver 470 (CUDA 11.4), no toolkit named: conda's cudatoolkit of the driver's CUDA
    ("cupy.cuda.driver.CUDADriverError: CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an "
     "unsupported toolchain.\n| NVIDIA-SMI 470.182.03   Driver Version: 470.182.03   CUDA Version: 11.4 |", "driver",
     ["cudatoolkit=11.4"]),
    # the stub set on LD_LIBRARY_PATH by a module file, cupy's words
    ("export LD_LIBRARY_PATH=/opt/cuda/11.8/lib64/stubs:$LD_LIBRARY_PATH\ncupy.cuda.runtime.CUDARuntimeError: "
     "cudaErrorUnknown: unknown error\ncuInit failed", "rocm-libs-missing",
     ["/opt/cuda/11.8/lib64/stubs", "LD_LIBRARY_PATH"]),
    # the stub's path in a dlopen failure (not numba): its folder
    ("OSError: /usr/local/cuda-11.7/targets/x86_64-linux/lib/stubs/libcuda.so: undefined symbol: cuDevicePrimaryCtxRetain",
     "rocm-libs-missing", ["/usr/local/cuda-11.7/targets/x86_64-linux/lib/stubs"]),
    # TheRock's wheels beside a torch built from source, another library and gfx
    ("pip install --index-url https://rocm.nightlies.amd.com/v2/gfx110X-dgpu/ 'rocm[libraries,devel]'\n"
     "pip install dist/torch-2.9.0a0+git1a2b3c4-cp311-cp311-linux_x86_64.whl\n"
     "ImportError: librocblas.so.5: cannot open shared object file: No such file or directory", "rocm-libs-missing",
     ["LD_LIBRARY_PATH", "_rocm_sdk_core/lib", "_rocm_sdk_libraries_gfx110X_dgpu/lib"]),   # TheRock _dist_info.py: "-" -> "_"
    # a slim image without the Vulkan loader, whisper.cpp's binary
    ("running whisper.cpp's server in a docker container (debian:bookworm-slim)\n./whisper-server: error while loading "
     "shared libraries: libvulkan.so.1: cannot open shared object file: No such file or directory",
     "rocm-libs-missing", ["libvulkan1", "Dockerfile"]),
    # the renamed thunk package, apt's own words
    ("sudo apt install rocm-hip-runtime\nThe following packages have unmet dependencies:\n hsa-rocr : Depends: "
     "hsakmt-roct but it is not installable", "rocm-libs-missing", ["hsakmt-roct-dev"]),
    # requirements replaced torch with 2.1, xformers fails: cu121 and its xformers
    ("pip install -r requirements.txt upgraded torch to 2.1.2 and now xformers fails to load its C++/CUDA "
     "extensions\nSuccessfully installed torch-2.1.2", "abi-mismatch", ["whl/cu121", "xformers==0.0.23.post1"]),
    # SD.Next with ZLUDA added after the first start, GPU idle
    ("SD.Next on Windows 10, RX 6800\nadded --use-zluda to the shortcut but the GPU sits at 2% and everything runs on "
     "the CPU", "torch-build", ["--use-zluda --reinstall"]),
    # the WanVideo wrapper by its sampler node, out of memory on a 16 GB card
    ("WanVideoSampler\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 0 has a total "
     "capacity of 15.99 GiB", "out-of-memory", ["blocks_to_swap", "VRAM Management"]),
]

NEGATIVES = [
    # interop on native Linux: not WSL's limit
    ("Ubuntu 22.04, RTX 3070\ncudaGraphicsGLRegisterImage failed: operation not supported", "OpenGL-CUDA interop is "
     "not yet supported"),
    # cuDF under WSL on an Ampere card: not Pascal
    ("WSL2, RTX 3090\ncudf.read_csv -> RuntimeError: cudaErrorNotSupported operation not supported", "Pascal or older"),
    # NVML blocked inside WSL itself (no guest of its own): not the GPU-PV copy
    ("WSL2 Ubuntu\n$ nvidia-smi\nFailed to initialize NVML: GPU access blocked by the operating system",
     "libd3d12core.so"),
    # enroot with NVIDIA_VISIBLE_DEVICES already set: another cause
    ("export NVIDIA_VISIBLE_DEVICES=all\nsrun --container-image=nvcr.io#nvidia/pytorch:24.01-py3 python train.py\n"
     "RuntimeError: Found no NVIDIA driver on your system.", "98-nvidia.sh"),
    # docker from Docker's repository: not the snap
    ("docker run --runtime=nvidia ubuntu nvidia-smi\ndocker: Error response from daemon: unknown or invalid runtime "
     "name: nvidia.", "snap refresh"),
    # a stubs folder in a file listing without any failure: not loaded
    ("$ find / -name 'libcuda.so*'\n/usr/local/cuda/lib64/stubs/libcuda.so\n/usr/lib/x86_64-linux-gnu/libcuda.so.1",
     "take /usr/local/cuda/lib64/stubs out"),
    # a ROCm package that exists under its name: not the rename
    ("The following packages have unmet dependencies:\n rocm-hip-runtime : Depends: hsakmt-roct-dev but it is not "
     "going to be installed", "install hsakmt-roct-dev first"),
    # requirements replaced torch but nothing about xformers: not the pair
    ("pip install -r requirements.txt replaced my torch 2.3.0+cu118 with torch 2.4.0", "xformers=="),
    # SD.Next with DirectML working: no CPU complaint
    ("SD.Next started with --use-directml, generating at 3 it/s on an RX 6600", "--reinstall"),
    # "OOO" with no error after it: out of office, not memory
    ("I'm OOO until Monday, will test the kijai I2V workflow then", "blocks_to_swap"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
