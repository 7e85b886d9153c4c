"""doctor, round 15 (issue 63): the NVIDIA / CUDA stack's own messages (p15a). Each canonical message of the CUDA
runtime and driver, NVML / NVRM, the container toolkit, cuBLAS / cuDNN / cuFFT, nvcc and CMake, TensorFlow's, JAX's and
Triton's GPU start-up and llama.cpp's / Ollama's CUDA lines, pasted with the context users paste it in (a traceback, a
pip list, nvidia-smi, a docker command); the negatives keep the readings out of pastes they do not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the GPU in Exclusive_Process mode held by another job
    ("$ nvidia-smi --query-gpu=index,name,compute_mode --format=csv\n0, Tesla V100-SXM2-32GB, Exclusive_Process\n"
     "  File \"train.py\", line 88, in <module>\n    model.cuda()\nRuntimeError: CUDA error: all CUDA-capable devices "
     "are busy or unavailable", "device-access", ["Exclusive_Process", "nvidia-smi -i <n> -c DEFAULT"]),
    # CUDA touched before a fork (a DataLoader worker)
    ("  File \"/opt/venv/lib/python3.10/site-packages/torch/cuda/__init__.py\", line 284, in _lazy_init\n"
     "    raise RuntimeError(\nRuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
     "multiprocessing, you must use the 'spawn' start method", "device-access", ["set_start_method(\"spawn\""]),
    # cuBLAS handle on a full GPU
    ("RTX 3060 12GB, loading Qwen-7B in fp16\n  File \"modeling_qwen.py\", line 510, in forward\n"
     "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
     "out-of-memory", ["nvidia-smi", "smaller batch"]),
    # an extension built without a toolkit
    ("pip install flash-attn --no-build-isolation\n      File \"/usr/lib/python3/dist-packages/torch/utils/"
     "cpp_extension.py\", line 2058, in _join_cuda_home\n      OSError: CUDA_HOME environment variable is not set. "
     "Please set it to your CUDA install root.", "rocm-libs-missing", ["export CUDA_HOME=", "prebuilt wheel"]),
    # nvcc and a too-new gcc
    ("$ gcc --version\ngcc (Ubuntu 13.2.0-4ubuntu3) 13.2.0\n/usr/local/cuda-12.1/include/crt/host_config.h:132:2: "
     "error: #error -- unsupported GNU version! gcc versions later than 12 are not supported!", "abi-mismatch",
     ["CC=gcc-12", "CUDAHOSTCXX"]),
    # torch's own g++ range check
    ("python setup.py install\nRuntimeError: The current installed version of g++ (13.2.0) is greater than the "
     "maximum required version by CUDA 12.1. Please make sure to use an adequate version of g++ (>=6.0.0, <13.0).",
     "abi-mismatch", ["CXX=g++-11"]),
    # nvcc on Windows without the developer prompt
    ("C:\\src\\ext> python setup.py build_ext\nnvcc fatal   : Cannot find compiler 'cl.exe' in PATH\n"
     "error: command 'nvcc.exe' failed with exit code 1", "rocm-libs-missing", ["Native Tools Command Prompt"]),
    # DirectML on Windows losing the device
    ("torch-directml 0.2.0, Windows 11, RTX 2070\nRuntimeError: DXGI_ERROR_DEVICE_REMOVED: The GPU device instance "
     "has been suspended. Use GetDeviceRemovedReason to determine the appropriate action.", "gpu-hang", ["TdrDelay"]),
    # JAX's cuDNN failing to start (the line naming why not pasted)
    ("jax 0.4.10, jaxlib 0.4.10+cuda11.cudnn86\n"
     "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization failed. Look at the "
     "errors above for more details.", "rocm-libs-missing", ["jax[cuda12]"]),
    # TensorFlow skipping the GPU
    ("pip list | grep tensorflow\ntensorflow 2.16.1\n2024-05-01 W tensorflow/core/common_runtime/gpu/gpu_device.cc:"
     "2251] Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned above are installed "
     "properly if you would like to use GPU.\nSkipping registering GPU devices...", "rocm-libs-missing",
     ["tensorflow[and-cuda]"]),
    # ComfyUI's async allocator on an old laptop GPU
    ("python main.py\nTotal VRAM 4096 MB, GTX 960M, cudaMallocAsync\nRuntimeError: CUDA error: operation not "
     "supported\nCUDA kernel errors might be asynchronously reported at some other API call", "gpu-unsupported",
     ["--disable-cuda-malloc"]),
    # CUDA_VISIBLE_DEVICES changed after torch started
    ("os.environ['CUDA_VISIBLE_DEVICES'] = '3'  # after import torch\ntorch.cuda.DeferredCudaCallError: CUDA call "
     "failed lazily at initialization with error: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
     "\"../aten/src/ATen/cuda/CUDAContext.cpp\":50", "visibility", ["before Python starts"]),
    # a 70B checkpoint loaded into 32 GB of RAM
    ("model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-70b-hf')\nRuntimeError: [enforce fail at "
     "alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 34359738368 bytes. "
     "Error code 12 (Cannot allocate memory)", "out-of-memory", ["low_cpu_mem_usage=True"]),
    # a Triton kernel tuned for an A100 on an RTX 3090
    ("GPU: NVIDIA GeForce RTX 3090\n  File \"triton/compiler/compiler.py\", line 370, in _init_handles\n"
     "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376. "
     "Reducing block sizes or `num_stages` may help.", "gpu-unsupported", ["num_stages", "does not"]),
    # Triton without a C compiler (a slim container)
    ("FROM python:3.11-slim\n  File \"triton/runtime/build.py\", line 32, in _build\n    raise RuntimeError(\"Failed "
     "to find C compiler. Please specify via CC environment variable.\")", "rocm-libs-missing", ["build-essential"]),
    # the stub libcuda first on the loader path
    ("$ echo $LD_LIBRARY_PATH\n/usr/local/cuda/lib64/stubs:/usr/local/cuda/lib64\nRuntimeError: CUDA error: CUDA "
     "driver is a stub library", "rocm-libs-missing", ["stubs folder"]),
    # the driver's PTX compiler missing in a container
    ("docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=utility myimage python run.py\nRuntimeError: CUDA error: "
     "PTX JIT compiler library not found", "rocm-libs-missing", ["NVIDIA_DRIVER_CAPABILITIES=compute,utility"]),
    # cuBLAS of another release than torch's
    ("pip list | grep -i nvidia-cublas\nnvidia-cublas-cu12 12.4.5.8\ntorch 2.1.2+cu121\nRuntimeError: CUDA error: "
     "CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16F, "
     "lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
     "rocm-libs-missing", ["--force-reinstall torch"]),
    # cuFFT of CUDA 11.7 on an RTX 4090
    ("torch 1.13.1+cu117, NVIDIA GeForce RTX 4090\n    return _VF.stft(input, n_fft, hop_length, win_length, window,\n"
     "RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", "arch-missing", ["whl/cu118"]),
    # NVRM refusing the card
    ("$ sudo dmesg | grep NVRM\n[  903.609564] NVRM: RmInitAdapter: Cannot "
     "initialize GSP firmware RM\n[  903.610907] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)",
     "driver", ["NVreg_EnableGpuFirmware=0"]),
    # a container asking for a GPU the host lacks
    ("docker compose up\nnvidia-container-cli: device error: 2: unknown device: unknown", "visibility",
     ["nvidia-smi -L"]),
    # an image that ships its own libnvidia-ml
    ("docker run --gpus all myimage\nnvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/"
     "706b/merged/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: file exists: unknown.", "device-access",
     ["libnvidia-compute-*"]),
    # Kubernetes without the device plugin
    ("kubectl describe pod gpu-pod\n  Warning  FailedScheduling  default-scheduler  0/3 nodes are available: 3 "
     "Insufficient nvidia.com/gpu.", "device-access", ["kubectl describe node"]),
    # CMake without nvcc (llama.cpp)
    ("cmake -B build -DGGML_CUDA=ON\nCMake Error at ggml/src/ggml-cuda/CMakeLists.txt:26 (enable_language):\n"
     "  No CMAKE_CUDA_COMPILER could be found.", "rocm-libs-missing", ["-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"]),
    # jax's CPU wheel on a GPU box
    ("pip install jax\nWARNING:2025-05-27 20:22:28,949:jax._src.xla_bridge:791: An NVIDIA GPU may be present on this "
     "machine, but a CUDA-enabled jaxlib is not installed. Falling back to cpu.", "torch-build", ["jax[cuda12]"]),
    # XLA without libdevice
    ("tf 2.12, ubuntu 22.04\nW tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at xla_ops.cc:362 : "
     "INTERNAL: libdevice not found at ./libdevice.10.bc", "rocm-libs-missing", ["--xla_gpu_cuda_data_dir"]),
    # Triton's ptxas newer than a 470 driver
    ("NVIDIA-SMI 470.182.03   Driver Version: 470.182.03   CUDA Version: 11.4\n  File \"triton/compiler/compiler.py\", "
     "line 285, in _init_handles\nRuntimeError: Triton Error [CUDA]: device kernel image is invalid", "driver",
     ["TRITON_PTXAS_PATH"]),
    # llama-cpp-python built for CC 5.2 on an RTX 3090
    ("CMAKE_ARGS=\"-DGGML_CUDA=on\" pip install llama-cpp-python\nggml-cuda.cu:1412: ERROR: CUDA kernel "
     "vec_dot_q4_K_q8_1_impl_vmmq has no device code compatible with CUDA arch 520. ggml-cuda.cu was compiled for: 520",
     "arch-missing", ["-DCMAKE_CUDA_ARCHITECTURES="]),
    # Ollama's runtime refused by an old driver
    ("time=2024-03-30T15:05:41.304Z level=INFO source=gpu.go:340 msg=\"Unable to load cudart CUDA management library "
     "/tmp/ollama4102197452/runners/cuda_v11/libcudart.so.11.0: cudart init failure: 35\"", "driver",
     ["update the NVIDIA driver"]),
    # faster-whisper with cuDNN 8 only
    ("pip show ctranslate2 faster-whisper\nctranslate2 4.5.0\nUnable to load any of {libcudnn_ops.so.9.1.0, "
     "libcudnn_ops.so.9.1, libcudnn_ops.so.9, libcudnn_ops.so}\nInvalid handle. Cannot load symbol "
     "cudnnCreateTensorDescriptor\nAborted (core dumped)", "rocm-libs-missing", ["nvidia-cudnn-cu12", "LD_LIBRARY_PATH"]),
    # Windows' page file too small for torch's DLLs
    ("python train.py --workers 8\nOSError: [WinError 1455] The paging file is too small for this operation to "
     "complete. Error loading \"C:\\venv\\lib\\site-packages\\torch\\lib\\cudnn_cnn_infer64_8.dll\" or one of its "
     "dependencies.", "out-of-memory", ["Virtual memory", "num_workers"]),
    # a rank that never joined
    ("torchrun --nnodes 2 --nproc_per_node 8 train.py\ntorch.distributed.DistStoreError: Timed out after 901 seconds "
     "waiting for clients. 1/2 clients joined.", "multi-gpu-transport", ["MASTER_ADDR"]),
    # vLLM beside another process on the GPU
    ("vllm serve Qwen/Qwen2.5-7B-Instruct\nValueError: Free memory on device (10.5/23.6 GiB) on startup is less than "
     "desired GPU memory utilization (0.9, 21.24 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
     "other processes.", "out-of-memory", ["--gpu-memory-utilization"]),
    # a float32 model with flash_attention_2
    ("model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=\"flash_attention_2\")\nValueError: Flash "
     "Attention 2.0 only supports torch.float16 and torch.bfloat16 dtypes, but the current dype in LlamaForCausalLM "
     "is torch.float32.", "precision", ["torch_dtype=torch.bfloat16"]),
    # torch's CUDA build on an NVIDIA machine without a driver
    ("$ lspci | grep -i vga\n01:00.0 VGA compatible controller: NVIDIA Corporation GA106 [GeForce RTX 3060]\n"
     "torch 2.3.1+cu121\nRuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
     "GPU and installed a driver from http://www.nvidia.com/Download/index.aspx", "driver",
     ["install the NVIDIA driver", "--gpus all"]),
    # the same message with no GPU named: the CUDA build, not a CPU one
    ("  File \"/usr/lib/python3/dist-packages/torch/cuda/__init__.py\", line 293, in _lazy_init\n"
     "    torch._C._cuda_init()\nRuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
     "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx", "torch-build",
     ["install the NVIDIA driver", "whl/rocm"]),
]

NEGATIVES = [
    # a CPU build of torch says its own words: not the driver fix
    ("torch 2.3.1+cpu\nAssertionError: Torch not compiled with CUDA enabled", "install the NVIDIA driver for this GPU"),
    # torch's CUDA build on an AMD GPU: the ROCm build, not an NVIDIA driver
    ("AMD Radeon RX 7900 XTX\nRuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
     "NVIDIA GPU and installed a driver", "install the NVIDIA driver for this GPU"),
    # ROCm's own missing-device message: no CUDA container advice
    ("RuntimeError: No HIP GPUs are available", "--gpus all (NVIDIA Container Toolkit installed)"),
    # a HIP kernel failure: not the CUDA launch-failure reading
    ("RuntimeError: HIP error: invalid device function", "pin_memory=False"),
    # a GPU out-of-memory: not the host-RAM reading
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
     "of which 1.2 GiB is free.", "low_cpu_mem_usage=True"),
    # a ROCm library missing: not the CUDA toolkit fix
    ("ImportError: libamdhip64.so.6: cannot open shared object file: No such file or directory", "export CUDA_HOME="),
    # flash-attn refusing a Turing GPU: not the float32 reading
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "torch_dtype=torch.bfloat16"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
