"""doctor, round 18 (r18d): readings for missed training cases of ctranslate2 pulled into an app's or a notebook's
environment beside a cuDNN 8 torch, jaxlib's cuDNN shadowed by another package's older copy, a ROCm torch crashing in
the system's HSA runtime of another release, a nixpkgs HIP package failing on its channel, Kokkos built for another
arch, Jetson boards (the board's arch in the JetPack torch fix, vLLM without 8.7 on Orin, OpenBLAS' core type on the
Cortex-A57 boards), an app's CUDA image without the GPU's kernels, OpenMM on a GPU its CUDA dropped, FP8 without FP8
hardware, Intel graphics without a Windows Vulkan driver, SDPA finding no kernel for its inputs, MIOpen's kernels not
compiling for an RDNA 3.5 APU, NCCL asked of a Windows torch, GPU UUIDs before torch 2.0, and enroot given host GPU
indices inside a Slurm allocation. Each paste is written for its reading (another GPU, tool, version or wording than
the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # ctranslate2's cuDNN 9 loader in a Jupyter notebook, the convolution library this time
    ("running the transcription cell in Jupyter\nUnable to load any of {libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, "
     "libcudnn_cnn.so.9, libcudnn_cnn.so}\nInvalid handle. Cannot load symbol cudnnCreateConvolutionDescriptor",
     "abi-mismatch", ["ctranslate2==4.4.0", "restart the runtime"]),
    # ... in a voice app installed on Windows the same day
    ("installed pandrator yesterday, the XTTS step now dies on Windows 10:\nCould not locate cudnn_ops64_9.dll. "
     "Please make sure it is in your library path!\nInvalid handle. Cannot load symbol cudnnCreateTensorDescriptor",
     "abi-mismatch", ["ctranslate2==4.4.0", "own environment"]),
    # jaxlib's CUDA 12 wheel tagged for cuDNN 8.9 with an older 8.5 loaded first
    ("jax 0.4.13, jaxlib 0.4.13+cuda12.cudnn89 on Debian 12, RTX A5000\nE external/xla/xla/stream_executor/cuda/"
     "cuda_dnn.cc:439] Loaded runtime CuDNN library: 8.5.0 but source was compiled with: 8.9.0.  CuDNN library needs "
     "to have matching major version and equal or higher minor version.", "abi-mismatch",
     ["tensorflow-cpu", "pip list"]),
    # a ROCm 6.0 torch on Arch's ROCm 6.2 runtime, crashing in ROCr
    ("Arch Linux, RX 7900 XTX, ROCm from /opt/rocm-6.2\ntorch 2.3.1+rocm6.0 in a venv\nThread 1 received signal SIGSEGV\n"
     "#0 0x00007ffff in rocr::core::Runtime::AllocateMemory (this=0x5555) at runtime.cpp:312", "abi-mismatch",
     ["whl/rocm6.2", "TORCH_COMMAND"]),
    # another nixpkgs package run through nix run on 24.11
    ("NixOS 24.11 (Vicuna), Radeon RX 6800\nnix run nixpkgs#blender-hip\nCycles: hipInit failed: Invalid device",
     "abi-mismatch", ["nixos-24.05", "blender-hip"]),
    # LAMMPS' KOKKOS package built for Volta on an A100
    ("lmp -k on g 1 -sf kk -in in.lj\nKokkos::Cuda::initialize WARNING: running kernels compiled for compute capability "
     "7.0 on device with compute capability 8.0 , this will likely reduce potential performance.", "arch-missing",
     ["nvcc_wrapper", "-arch=sm_80", "Kokkos_ARCH_AMPERE80"]),
    # a pytorch.org torch on a Jetson Nano
    ("Jetson Nano 4GB, JetPack 4.6.1\npip3 install torch==1.10.0\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["TORCH_CUDA_ARCH_LIST=5.3", "JetPack"]),
    # vLLM serving on an Orin NX
    ("Jetson Orin NX 16GB, built vllm 0.8.4 from source\nvllm serve Qwen/Qwen2.5-1.5B-Instruct\nRuntimeError: CUDA "
     "error: no kernel image is available for execution on the device", "arch-missing",
     ["TORCH_CUDA_ARCH_LIST=8.7", "19328"]),
    # numpy's OpenBLAS on a TX2
    ("Jetson TX2, JetPack 4.4, python3 -c \"import numpy\"\nIllegal instruction (core dumped)", "arch-missing",
     ["OPENBLAS_CORETYPE=ARMV8"]),
    # OpenMM on a Kepler GeForce under CUDA 11.8
    ("OpenMM 8.0.0 from conda-forge, GeForce GTX 680, cuda 11.8\nopenmm.OpenMMException: Error compiling program: "
     "nvrtc: error: invalid value for --gpu-architecture (-arch)", "gpu-unsupported", ["cudatoolkit=10.2"]),
    # ... and on a K80 under CUDA 12.2
    ("python -m openmm.testInstallation\nTesla K80, CUDA 12.2\nCUDA - Error computing forces: nvrtc: error: invalid "
     "value for --gpu-architecture (-arch)", "gpu-unsupported", ["cudatoolkit=11.8"]),
    # FP8 engine build on an RTX 3090
    ("trtllm-build --checkpoint_dir ./ckpt_fp8 --output_dir ./engine\nGPU: RTX 3090\n[TRT] [E] 9: Error Code 9: "
     "Internal Error (Networks with FP8 precision require hardware with FP8 support.)", "gpu-unsupported",
     ["Hopper", "INT8"]),
    # an ncnn upscaler on a Haswell laptop's graphics
    ("Windows 10 laptop, Intel HD Graphics 4600\nrealesrgan-ncnn-vulkan.exe -i in.png -o out.png\nvkCreateInstance "
     "failed -9", "gpu-unsupported", ["Vulkan-capable GPU"]),
    # SDPA's fused kernels skipping 3-D inputs on an A10G
    ("torch 2.2.0+cu118 on an A10G\nUserWarning: Both fused kernels requires query, key and value to be 4 "
     "dimensional, but got Query dim: 3, Key dim: 3, Value dim: 3 instead.\nRuntimeError: No available kernel.  "
     "Aborting execution.", "attention", ["unsqueeze", "4-D"]),
    # a multi-GPU launch on Windows
    ("accelerate launch --multi_gpu train.py on Windows 11 with two RTX 4090\nRuntimeError: Distributed package "
     "doesn't have NCCL built in", "multi-gpu-transport", ["WSL 2", "Linux"]),
    # GPU UUIDs from a scheduler under torch 1.12
    ("torch 1.12.1+cu113, the batch system sets CUDA_VISIBLE_DEVICES=GPU-3f2a9c1e-77d0-4c1b-9e0f-5a2b8c7d6e10\n"
     "torch.cuda.is_available() returns False although nvidia-smi shows the card", "visibility",
     ["torch 2.0", "nvidia-smi -L"]),
    # pyxis with host indices kept for two GPUs
    ("srun --gres=gpu:2 --container-image=nvcr.io#nvidia/pytorch:24.01-py3 with NVIDIA_VISIBLE_DEVICES=2,3 exported "
     "(the slurm allocation)\npyxis: container start failed\nnvidia-container-cli: device error: 3: unknown device",
     "visibility", ["NVIDIA_VISIBLE_DEVICES=all", "--gres=gpu:2"]),
    # Open WebUI's CUDA image on an RTX 5070 Ti
    ("docker run -d --gpus all ghcr.io/open-webui/open-webui:cuda\nGPU: RTX 5070 Ti\nembedding the documents fails: "
     "CUDA error: no kernel image is available for execution on the device", "arch-missing",
     ["USE_CUDA_VER=cu128"]),
    # MIOpen failing to compile on a Radeon 890M
    ("Radeon 890M (gfx1150), torch 2.9.0+rocm7.1, Ubuntu 24.04\nF.conv2d fails: MIOpen Error: "
     "miopenStatusUnknownError: stoul", "miopen-kernel", ["v2/gfx1150", "--force-reinstall"]),
]

NEGATIVES = [
    # a user's own environment with torch 2.5 (cuDNN 9): the path reading, not the pin-back one
    ("torch==2.5.1\nctranslate2==4.5.0\nUnable to load any of {libcudnn_ops.so.9.1.0, libcudnn_ops.so.9.1, "
     "libcudnn_ops.so.9, libcudnn_ops.so}", "the last release built for cuDNN 8"),
    # jaxlib without its cuDNN tag, a cuDNN the user installed: not another package's copy
    ("I installed cudnn 8.0.5 myself\njaxlib 0.1.65+cuda112\nLoaded runtime CuDNN library: 8.0.5 but source was "
     "compiled with: 8.1.0.", "tensorflow-cpu"),
    # the torch's own ROCm release on the system: not the runtime mismatch
    ("/opt/rocm-6.0 installed\ntorch 2.3.1+rocm6.0\nsegfault in rocr::core::Runtime", "torch built for the system's ROCm"),
    # hipInit failing on Ubuntu: no NixOS channel
    ("Ubuntu 22.04, ROCm 6.1\nHIP hipInit: hipErrorInvalidDevice", "nixos-"),
    # Kokkos built for the GPU's own arch: nothing to rebuild
    ("Kokkos::Cuda::initialize WARNING: running kernels compiled for compute capability 8.0 on device with compute "
     "capability 8.0", "nvcc_wrapper"),
    # vLLM's missing kernels on a desktop card: not the Orin pull request
    ("RTX 3090\nvllm serve meta-llama/Llama-3.1-8B\nCUDA error: no kernel image is available for execution on the "
     "device", "19328"),
    # an Illegal instruction on an Orin (Cortex-A78AE cores): not the A57 boards' OpenBLAS setting
    ("Jetson AGX Orin\npython3 -c 'import torch'\nIllegal instruction (core dumped)", "OPENBLAS_CORETYPE"),
    # OpenMM's NVRTC error on a GPU newer than its CUDA: not an older toolkit
    ("OpenMM 7.5, RTX 3090, cudatoolkit 11.0\nnvrtc: error: invalid value for --gpu-architecture (-arch)",
     "cudatoolkit=10.2"),
    # FP8 refused on an H100 (the GPU has FP8): not the hardware reading
    ("H100 80GB\nError Code 9: Internal Error (Networks with FP8 precision require hardware with FP8 support.)",
     "quantize for what the GPU has instead"),
    # a Haswell iGPU under Linux: Mesa serves it, not the no-Vulkan reading
    ("Ubuntu 22.04, Intel HD Graphics 4600\nvkCreateInstance failed -9", "cannot run Vulkan"),
    # flash-attn missing kernels: not SDPA's input reading
    ("flash_attn 2.5.6\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "unsqueeze"),
    # no NCCL in a Linux torch: not the Windows reading
    ("Ubuntu 22.04, torch built from source\nDistributed package doesn't have NCCL built in",
     "natively, or on Windows inside WSL 2"),
    # UUIDs under torch 2.1: torch reads them
    ("torch 2.1.0+cu121\nCUDA_VISIBLE_DEVICES=GPU-3f2a9c1e python train.py\ntorch.cuda.is_available() returns False",
     "pytorch PR 92315"),
    # docker's own unknown device: not the Slurm reading
    ("docker run --gpus '\"device=3\"' nvidia/cuda:12.4.0-base nvidia-smi\nnvidia-container-cli: device error: 3: "
     "unknown device", "gres"),
    # Open WebUI out of memory: not its image's CUDA build
    ("ghcr.io/open-webui/open-webui:cuda in docker\ntorch.OutOfMemoryError: CUDA out of memory.", "USE_CUDA_VER"),
    # MIOpen's stoul error on a discrete RDNA 3 card: not the APU nightly reading
    ("RX 7900 XTX (gfx1100), torch 2.9.0+rocm7.1\nMIOpen Error: miopenStatusUnknownError: stoul", "--force-reinstall"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
