"""doctor, round 15 (issue 63): the ROCm stack's own messages (HIP, ROCr, KFD, rocm-smi, torch's AMD SMI warning,
hipBLASLt, Triton's fp8 check, Ollama, llama.cpp, TheRock's wheels), each in a paste of our own with the context users
paste it in; the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # HIP's launch failure from a ComfyUI run: serialise the kernels, then dmesg
    ("python main.py\n  File \"torch/nn/modules/conv.py\", line 548, in _conv_forward\n    return F.conv2d(\n"
     "torch.AcceleratorError: HIP error: unspecified launch failure\nSearch for `hipErrorLaunchFailure' in "
     "https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more information.", "gpu-hang",
     ["AMD_SERIALIZE_KERNEL=3", "dmesg"]),
    # the warning form of it, a timm run
    ("train.py:1043: UserWarning: HIP warning: unspecified launch failure (Triggered internally at "
     "aten/src/ATen/hip/impl/HIPGuardImplMasqueradingAsCUDA.h:83.)", "gpu-hang", ["AMD_SERIALIZE_KERNEL=3"]),
    # ROCr's illegal instruction from a HIP program
    (":0:rocdevice.cpp :2875: Device::callbackQueue aborting with error : HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: The "
     "agent attempted to execute an illegal shader instruction. code: 0x2a", "arch-missing",
     ["HSA_OVERRIDE_GFX_VERSION"]),
    # a code object the runtime refuses: two ROCm installs
    ("ls -d /opt/rocm*\n/opt/rocm-6.4.1  /opt/rocm-7.1.0\n./bin/llama-cli -m model.gguf -ngl 99\n"
     ":0:rocdevice.cpp :3020: Aborting with error : HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid.",
     "rocm-libs-missing", ["one ROCm", "LD_LIBRARY_PATH"]),
    # rocminfo failing to start HSA (the first line of its error alone)
    ("$ rocminfo\nROCk module version 6.10.5 is loaded\nhsa api call failure at: "
     "/long_pathname_so_that_rpms_can_package_the_debug_info/src/rocminfo/rocminfo.cc:1306", "device-access",
     ["render,video"]),
    # rocm-smi's low-power warning
    ("$ rocm-smi\n\nWARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n",
     "driver", ["power/control"]),
    # KFD's oversubscription warning during a multi-process run
    ("$ sudo dmesg | tail -3\n[ 2211.31] amdgpu: Runlist is getting oversubscribed. Expect reduced ROCm performance.",
     "gpu-hang", ["GPU_MAX_HW_QUEUES", "fewer"]),
    # hipBLASLt refusing a matmul (torch's hipified wording)
    ("    ray_directions = torch.matmul(K, C).squeeze(-1)\nRuntimeError: CUDA error: HIPBLAS_STATUS_NOT_SUPPORTED when "
     "calling `HIPBLAS_STATUS_NOT_SUPPORTED`", "arch-missing", ["TORCH_BLAS_PREFER_HIPBLASLT=0"]),
    # Ollama's override hint with its "no compatible" line
    ("time=2025-03-01T11:37:39.549+02:00 level=WARN source=amd_linux.go:383 msg=\"See https://github.com/ollama/ollama/"
     "blob/main/docs/gpu.md#overrides for HSA_OVERRIDE_GFX_VERSION usage\"\ntime=2025-03-01T11:37:39.549+02:00 "
     "level=INFO source=amd_linux.go:402 msg=\"no compatible amdgpu devices detected\"", "arch-missing",
     ["HSA_OVERRIDE_GFX_VERSION", "systemctl"]),
    # llama.cpp's own OOM wording on ROCm
    ("llama-server -m qwen2.5-32b-q4_k_m.gguf -ngl 99 -c 32768\nROCm error: out of memory\n  current device: 0, in "
     "function ggml_cuda_pool_leg::alloc at ggml/src/ggml-cuda/ggml-cuda.cu:360", "out-of-memory", ["-ngl"]),
    # Triton's fp8 refusal on an MI300X
    ("vllm serve Qwen/Qwen3-30B-A3B-FP8 on MI300X\nValueError(\"type fp8e4nv not supported in this architecture. The "
     "supported fp8 dtypes are ('fp8e4b8', 'fp8e5b16')\")", "precision", ["bf16", "fnuz"]),
    # torch's AMD SMI warning under WSL
    ("docker run -it rocm/pytorch:latest\n/opt/conda/lib/python3.10/site-packages/torch/cuda/__init__.py:736: "
     "UserWarning: Can't initialize amdsmi - Error code: 34", "driver", ["harmless", "is_available"]),
    # TheRock's wheels without devel
    ("pip install --index-url https://rocm.nightlies.amd.com/v2/gfx110X-all/ torch\n$ rocm-sdk init\nERROR: ROCm SDK "
     "development package is not installed. This can typically be obtained by installing `rocm[devel]` from your "
     "package manager", "rocm-libs-missing", ["rocm[devel]", "same index"]),
    # torch's HIP init warning with error 101, no arch in the paste
    (">>> torch.cuda.is_available()\nUserWarning: HIP initialization: Unexpected error from hipGetDeviceCount(). Did "
     "you run some cuda functions before calling NumHipDevices() that might have already set an error? Error 101: "
     "hipErrorInvalidDevice (Triggered internally at ../c10/hip/HIPFunctions.cpp:110.)\nFalse", "arch-missing",
     ["VISIBLE", "rocminfo"]),
]

NEGATIVES = [
    # torch's ordinary allocator OOM: not llama.cpp's layer advice
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.98 GiB",
     "-ngl"),
    # a ROCm torch's HIP init warning is no CUDA/CPU build to replace
    ("torch 2.5.1+rocm6.2\nUserWarning: HIP initialization: Unexpected error from hipGetDeviceCount(). Did you run some "
     "cuda functions before calling NumHipDevices() that might have already set an error? Error 101: "
     "hipErrorInvalidDevice", "pip uninstall -y torch torchvision"),
    # flash-attn's support statement names no GPU of this machine: no hidden override
    ("$ rocminfo | grep gfx\n  Name:                    gfx1100\nFlashAttention only supports AMD MI200 GPUs or newer.",
     "left from another card"),
    # rocm-smi's low-power warning is no driver to reinstall
    ("WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status", "amdgpu-install"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
