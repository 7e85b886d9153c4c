"""doctor, round 12 (issue 63): readings for batch 11's missed training cases of helper e (TensorFlow / PaddlePaddle
built for another CUDA or cuDNN, XLA without ptxas, nvidia-ctk under a driver container, cudnn.h in an extension
build, llama.cpp's Windows HIP zip without the ROCm runtime). Each paste is written for its reading with another
version, tool or wording than the mined case; the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # TensorFlow 2.0 (CUDA 10.0) on a machine with CUDA 10.2, said by its soname: CUDA 10.0, or the release for 10.2
    # (none) -- the library name's CUDA wins
    ("tensorflow-gpu==2.0.0 on Ubuntu 18.04, CUDA version: 10.2, RTX 2080\n>>> import tensorflow as tf\n"
     "ImportError: libcudart.so.10.0: cannot open shared object file: No such file or directory",
     "rocm-libs-missing", ["CUDA 10.0", "cuDNN 7.4"]),
    # TensorFlow 2.1 on Windows with CUDA 10.0 installed: CUDA 10.1's DLL asked for; or the release for CUDA 10.0
    ("Windows 10, GTX 1070, CUDA 10.0 and cuDNN 7.6\nTensorFlow version: 2.1.0\nW tensorflow/stream_executor/platform/"
     "default/dso_loader.cc:55] Could not load dynamic library 'cudart64_101.dll'; dlerror: cudart64_101.dll not found",
     "rocm-libs-missing", ["CUDA 10.1", "tensorflow-gpu==2.0"]),
    # the cuSOLVER split inside CUDA 11 (Linux soname, a stable release): 11.0's library on a CUDA 11.4 machine
    ("TensorFlow 2.4.1, CUDA 11.4, A100\nCould not load dynamic library 'libcusolver.so.10'; dlerror: "
     "libcusolver.so.10: cannot open shared object file: No such file or directory",
     "rocm-libs-missing", ["CUDA 11.0", "tensorflow==2.11"]),
    # an import failing with no library named: the release's CUDA against the installed one
    ("I'm on Windows 10 with CUDA 9.0 installed and tensorflow-gpu 1.14.0\n"
     "ImportError: DLL load failed: The specified module could not be found.\n"
     "Failed to load the native TensorFlow runtime.", "rocm-libs-missing", ["CUDA 10.0", "tensorflow-gpu==1.12"]),
    # the library the installed CUDA has itself: off the loader's path only
    ("tensorflow 2.3.0, CUDA version: 10.1\nCould not load dynamic library 'libcudart.so.10.1'; dlerror: "
     "libcudart.so.10.1: cannot open shared object file: No such file or directory",
     "rocm-libs-missing", ["LD_LIBRARY_PATH"]),
    # Paddle's PyPI build (CUDA 10.2, cuDNN 7) on a CUDA 11.7 Linux machine: the post117 build
    ("paddlepaddle-gpu==2.4.1 on Ubuntu 22.04, CUDA 11.7, cuDNN 8.4\nPreconditionNotMet: The third-party dynamic "
     "library (libcudnn.so.7) that Paddle depends on is not configured correctly. (error code is libcudnn.so.7: cannot "
     "open shared object file: No such file or directory)", "rocm-libs-missing",
     ["2.4.1.post117", "whl/linux/mkl/avx/stable.html"]),
    # Paddle's PyPI build wanting CUDA 10.2's cuBLAS on Windows with CUDA 11.6: the post116 build
    ("Windows 11, paddlepaddle-gpu 2.5.1, CUDA 11.6\nThe third-party dynamic library (cublas64_10.dll) that Paddle "
     "depends on is not configured correctly. (error code is 126)", "rocm-libs-missing",
     ["2.5.1.post116", "whl/windows"]),
    # Paddle's unversioned library on Linux: the folder on LD_LIBRARY_PATH
    ("paddle 2.2.2\nThe third-party dynamic library (libcublas.so) that Paddle depends on is not configured correctly. "
     "(error code is /usr/local/cuda/lib64/libcublas.so: cannot open shared object file: No such file or directory)",
     "rocm-libs-missing", ["LD_LIBRARY_PATH"]),
    # XLA without ptxas, from TensorFlow this time
    ("TF 2.12 in a conda env on a T4\nW tensorflow/compiler/xla/stream_executor/gpu/asm_compiler.cc:115] *** WARNING "
     "*** You are using ptxas 10.1.243, which is older\nCouldn't get ptxas version string: INTERNAL: Couldn't invoke "
     "ptxas --version\nF Failed to launch ptxas", "rocm-libs-missing", ["PATH", "nvidia-cuda-nvcc-cu12"]),
    # nvidia-ctk under the GPU Operator's driver container, another wording
    ("GPU Operator installs the driver container on our RHCOS nodes\n$ nvidia-ctk cdi generate --output=/etc/cdi/"
     "nvidia.yaml\nERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to initialize NVML: "
     "ERROR_LIBRARY_NOT_FOUND", "rocm-libs-missing", ["--driver-root=/run/nvidia/driver"]),
    # cudnn.h missing in another extension build, an EasyBuild module's variable
    ("module load cuDNN/8.9.2.26-CUDA-12.1.1\npip install flash-attn --no-build-isolation\n"
     "/usr/include/ATen/cudnn/cudnn-wrapper.h:3:10: fatal error: cudnn.h: No such file or directory\n"
     "echo $EBROOTCUDNN works", "rocm-libs-missing", ["CUDNN_PATH=$EBROOTCUDNN", "CPATH"]),
    # llama.cpp's Windows HIP zip without rocblas (another asset name and GPU)
    ("Downloaded llama-b7000-bin-win-hip-radeon-x64.zip, RX 7900 XTX on Windows 11\nllama-cli.exe --list-devices prints "
     "no devices; Dependencies shows rocblas.dll not found", "rocm-libs-missing", ["rocblas\\library", "PATH"]),
]

NEGATIVES = [
    # a TensorFlow whose library is found and the GPU listed: no build reading
    ("tensorflow 2.15.0, CUDA 12.2\nI tensorflow/stream_executor/platform/default/dso_loader.cc:53] Successfully "
     "opened dynamic library libcudart.so.12\nPhysical devices: [PhysicalDevice(name='/physical_device:GPU:0')]",
     "is built for CUDA"),
    # torch's own cuDNN, no TensorFlow or Paddle: not a framework-release reading
    ("import torch\nOSError: libcudnn.so.8: cannot open shared object file: No such file or directory\ntorch 2.0.1",
     "tensorflow"),
    # a ptxas too old for the PTX: the version reading, not "ptxas not found"
    ("triton\nptxas fatal   : Unsupported .version 8.4; current version is '8.2'", "XLA compiles its GPU kernels"),
    # nvidia-ctk with NVML found (another error): not the driver-root reading
    ("$ nvidia-ctk cdi generate\nERRO failed to generate CDI spec: unknown device", "--driver-root"),
    # a header other than cudnn.h missing: not the cuDNN reading
    ("fatal error: cuda_runtime_api.h: No such file or directory", "CUDNN_PATH"),
    # llama.cpp's HIP build on Linux with no DLL said missing: not the Windows zip reading
    ("llama.cpp built with -DGGML_HIP=ON on Ubuntu, RX 6800: ggml_cuda_init: found 1 ROCm devices",
     "next to llama-server.exe"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
