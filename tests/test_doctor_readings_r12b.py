"""doctor, round 12 (issue 63): readings for batch 11's missed training cases of the arch families (a framework's
CUDA build older than the GPU, NVRTC without the GPU's arch, ggml and MLC builds without the GPU's target, tinygrad's
AMD backend, DeepSpeed's op floors, Triton's floor with the script's compile switch, the override in a notebook).
Each paste is written for its reading (another GPU, tool, version or wording than the mined case that asked for it);
the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Paddle's own arch check on another card and CUDA (a Turing-only CUDA 10.2 wheel, an RTX 3060, its start-up note)
    ("W0601 12:00:01.123 gpu_resources.cc:61] The GPU architecture in your current machine is Ampere, which is not "
     "compatible with Paddle installation with arch: 35 50 52 60 61 70 75 , it is recommended to install the "
     "corresponding wheel package according to the installation information on the official Paddle website.\n"
     "W0601 12:00:01.124 gpu_resources.cc:91] Please NOTE: device: 0, GPU Compute Capability: 8.6, Driver API "
     "Version: 12.2, Runtime API Version: 10.2\nPaddleOCR then hangs on the first image, RTX 3060 on Ubuntu",
     "arch-missing", ["CUDA 11.0", "paddlepaddle-gpu", "10.2"]),
    # a Hopper card Paddle's table has no name for: the number form
    ("python -c 'import paddle; paddle.utils.run_check()'\nThe GPU compute capability in your current machine is 90, "
     "which is not supported by Paddle, it is recommended to install the corresponding wheel package\nH100 80GB",
     "arch-missing", ["paddlepaddle-gpu", "CUDA 11.8"]),
    # TensorFlow on a CUDA 10.0 toolkit with an A100 (another card, version and message): the CUDA 11 build
    ("A100 40GB, Ubuntu 18.04, cuda 10.0, cudnn 7.4, tensorflow-gpu 1.15\n2021-03-02 10:00:00.000000: E "
     "tensorflow/stream_executor/cuda/cuda_driver.cc:1010] failed to run cuBLAS routine: CUBLAS_STATUS_EXECUTION_FAILED\n"
     "tensorflow.python.framework.errors_impl.InternalError: CUDA runtime implicit initialization on GPU:0 failed. "
     "Status: device kernel image is invalid", "arch-missing", ["CUDA 11.0", "TensorFlow 2.4"]),
    # NVRTC of CUDA 11.3 (torch 1.10) on an RTX 4080: a build for the CUDA that knows sm_89, no 1.7.1 talk
    ("torch 1.10.1+cu113 on an RTX 4080\n  File \"/opt/conda/lib/python3.8/site-packages/torch/nn/modules/module.py\", "
     "line 1102, in _call_impl\nRuntimeError: nvrtc: error: invalid value for --gpu-architecture (-arch)\n\nnvrtc "
     "compilation failed:", "arch-missing", ["CUDA 11.8", "download.pytorch.org/whl/cu"]),
    # CuPy's NVRTC of CUDA 13 on a Pascal card: older than that NVRTC compiles
    ("GTX 1080 Ti, cupy-cuda13x\n>>> import cupy as cp; cp.arange(5).sum()\ncupy_backends.cuda.libs.nvrtc.NVRTCError: "
     "NVRTC_ERROR_INVALID_OPTION (5)\nCompileException: nvrtc: error: invalid value for --gpu-architecture (-arch)\n"
     "CUDA 13.0", "arch-missing", ["cupy-cuda12x"]),
    # the same error with the GPU unnamed under torch 1.7.0: 1.7.1's cap, and how to find the capability
    ("pip list: torch 1.7.0\nRuntimeError: nvrtc: error: invalid value for --gpu-architecture (-arch)\nnew card, "
     "worked on my old one", "arch-missing", ["1.7.1", "compute_cap"]),
    # a ggml program of its own (stable-diffusion.cpp, another card and wording) without the GPU's target
    ("./sd -m models/sd_xl_base_1.0.safetensors -p 'a cat'\nggml_cuda_init: found 1 ROCm devices:\n  Device 0: AMD "
     "Radeon RX 7600, compute capability 11.0, VMM: no\n[INFO ] stable-diffusion.cpp:185  - loading model\n"
     "ggml_cuda_compute_forward: MUL_MAT failed\nCUDA error: shared object initialization failed",
     "arch-missing", ["stable-diffusion.cpp", "AMDGPU_TARGETS=gfx11", "SD_HIPBLAS=ON"]),
    # an MLC model library from the prebuilt set on an unnamed AMD GPU (newer CLI): compile it for the GPU's arch
    ("mlc_llm chat HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC --device rocm\nTVMError: ROCM HIP Error: "
     "hipModuleLoadData(&(module_[device_id]), data_.c_str()) failed with error: hipErrorSharedObjectInitFailed",
     "arch-missing", ["mcpu", "mlc_llm compile"]),
    # tinygrad's AMD backend refusing an RDNA1 card in its own words: its HIP backend
    ("AMD=1 python examples/beautiful_mnist.py\n  File \"tinygrad/runtime/ops_amd.py\", line 391, in __init__\n"
     "RuntimeError: Unsupported arch: gfx1010\n(tinygrad 0.10.0, RX 5700 XT)", "arch-missing", ["HIP=1", "gfx1010"]),
    # DeepSpeed's FastGen op on a V100 (another op, card and wording): the floor, MII's legacy path
    ("import mii; mii.serve('meta-llama/Llama-2-7b-hf')\n...\nRuntimeError: Unable to load inference_core_ops op "
     "due to no compute capabilities remaining after filtering\nGPU: Tesla K80", "gpu-unsupported",
     ["6.0", "MII-Legacy"]),
    ("deepspeed fp quantizer on a T4:\nRuntimeError: Unable to load fp_quantizer op due to no compute capabilities "
     "remaining after filtering", "gpu-unsupported", ["8.0"]),
    # Triton's floor with another card and a Trainer: the compile switch off
    ("Trainer(args=TrainingArguments(torch_compile=True, ...)) on a Tesla P100\nRuntimeError: Found Tesla P100-PCIE-16GB "
     "which is too old to be supported by the triton GPU compiler, which is used as the backend. Triton only supports "
     "devices of CUDA Capability >= 7.0, but your device is of CUDA capability 6.0", "gpu-unsupported",
     ["compile=False", "torch_compile=False"]),
    # the override in a Jupyter session (another RDNA2 card): the cell, and the shell that starts the session
    ("In [1]: import torch\nIn [2]: torch.cuda.get_device_name(0)\nOut[2]: 'AMD Radeon RX 6600'\nIn [3]: "
     "torch.ones(2).cuda() * 2\nRuntimeError: HIP error: invalid device function", "arch-missing",
     ["os.environ", "export HSA_OVERRIDE_GFX_VERSION=10.3.0"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # a CUDA 11 toolkit with an Ampere card under TensorFlow: not "the CUDA predates the GPU"
    ("RTX 3090, CUDA 11.2, tensorflow 2.6\nInternalError: CUDA runtime implicit initialization on GPU:0 failed. "
     "Status: device kernel image is invalid", "instead of the one for CUDA"),
    # nvidia-smi's CUDA Version is the driver's, not TensorFlow's build
    ("| NVIDIA-SMI 450.80.02    Driver Version: 450.80.02    CUDA Version: 11.0 |\nRTX 3080 tensorflow 2.3\n"
     "InternalError: CUDA runtime implicit initialization on GPU:0 failed. Status: device kernel image is invalid",
     "instead of the one for CUDA 11.0"),
    # Paddle's CUDA/cuDNN mismatch warning is not its arch check
    ("W0601 gpu_resources.cc:119] WARNING: device: 0. The installed Paddle is compiled with CUDNN 8.9, but CUDNN "
     "version in your machine is 8.6, which may cause serious incompatible bug.", "paddlepaddle-gpu wheel built"),
    # another program's "unsupported arch" (a build system's CPU arch): not tinygrad's backend
    ("cmake .. -DCMAKE_SYSTEM_PROCESSOR=riscv64\nCMake Error: Unsupported arch: riscv64", "HIP=1"),
    # tinygrad named, but its error is another one: no backend swap
    ("tinygrad on an RX 7900 XTX: AMD=1 python gpt2.py\nRuntimeError: out of memory allocating 24GB", "HIP=1"),
    # DeepSpeed's op builder failing for a missing compiler, not a floor
    ("RuntimeError: Error building extension 'ragged_device_ops': ninja: build stopped: subcommand failed\n"
     "nvcc fatal: Unsupported gpu architecture 'compute_90'", "MII-Legacy"),
    # Triton's floor on a card above it is not this reading: no compile switch advice for a CUDA-missing error
    ("RTX 4090\nRuntimeError: Found no NVIDIA driver on your system.", "compile=False"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
