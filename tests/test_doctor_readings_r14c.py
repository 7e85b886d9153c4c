"""doctor, round 14 (issue 63): readings of the CUDA Python stack's driver and toolkit pieces (numba, CuPy, cuML,
TensorRT-based servers, extensions built at install): a driver variable naming another library, numba finding no driver
or no NVVM, a Linux driver's libcuda inside WSL 2, PTX from a CUDA newer than the driver, a driver release that breaks
a program, and a CUDA extension installed without the toolkit. Each paste is written for its reading (another GPU,
tool, version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does
not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # numba's driver variable naming NVVM instead of the driver (Fedora: its lib64 path)
    ("Fedora 39, numba 0.58\nexport NUMBA_CUDA_DRIVER=/usr/local/cuda-12.2/nvvm/lib64/libnvvm.so\n"
     "numba.cuda.cudadrv.error.CudaDriverError: driver missing function: cuDeviceGet", "rocm-libs-missing",
     ["NUMBA_CUDA_DRIVER=/usr/lib64/libcuda.so.1", "unset"]),
    # the toolkit's stub named as the driver
    ("NUMBA_CUDA_DRIVER=/usr/local/cuda/lib64/stubs/libcuda.so python train_kernels.py\n"
     "numba.cuda.cudadrv.driver.CudaAPIError: [34] Call to cuInit results in CUDA_ERROR_STUB_LIBRARY",
     "rocm-libs-missing", ["NUMBA_CUDA_DRIVER=/usr/lib/x86_64-linux-gnu/libcuda.so.1"]),
    # numba finding no driver on a Linux box (a RAPIDS notebook)
    ("import cudf  # RAPIDS 24.04 in a conda env\nnumba.cuda.cudadrv.error.CudaSupportError: Error at driver init: \n"
     "CUDA driver library cannot be found.\nIf you are sure that a CUDA driver is installed,\ntry setting environment "
     "variable NUMBA_CUDA_DRIVER with the file path of the CUDA driver shared library.", "rocm-libs-missing",
     ["nvidia-smi", "--gpus all", "NUMBA_CUDA_DRIVER"]),
    # numba without NVVM (pip install, a system toolkit elsewhere)
    ("pip install numba; running a @cuda.jit kernel\nnumba.cuda.cudadrv.error.NvvmSupportError: libNVVM cannot be "
     "found. Do `conda install cudatoolkit`:\nlibrary nvvm not found", "rocm-libs-missing",
     ["CUDA_HOME", "numba-cuda", "cuda-nvcc"]),
    # WSL 2: a Linux driver package's libcuda named by ldconfig, CuPy failing (another branch)
    ("Ubuntu 24.04 under WSL2, RTX 4070\n$ ldconfig -p | grep libcuda\n\tlibcuda.so.1 (libc6,x86-64) => "
     "/usr/lib/x86_64-linux-gnu/libcuda.so.1\n$ dpkg -l | grep nvidia\nii  libnvidia-compute-535  535.183.01\n"
     ">>> import cupy; cupy.cuda.runtime.getDeviceCount()\ncupy_backends.cuda.api.runtime.CUDARuntimeError: "
     "cudaErrorNoDevice: no CUDA-capable device is detected\nnumba.cuda.cudadrv.driver.CudaAPIError: [100] Call to "
     "cuInit results in CUDA_ERROR_NO_DEVICE", "wsl", ["libnvidia-compute-535", "/usr/lib/wsl/lib"]),
    # WSL 2: cuML's numba failing at cuInit, no Linux driver shown: WSL's folder for numba
    ("cuml 24.02 on wsl, windows 10 22H2, RTX 3060\nfrom cuml.cluster import KMeans\nnumba.cuda.cudadrv.error."
     "CudaSupportError: Error at driver init: Call to cuInit results in CUDA_ERROR_NO_DEVICE (100)", "wsl",
     ["NUMBA_CUDA_DRIVER=/usr/lib/wsl/lib/libcuda.so.1", "LD_LIBRARY_PATH=/usr/lib/wsl/lib"]),
    # numba's JIT link on an old driver: nvidia-smi's CUDA Version, a CUDA 11 conda toolkit
    ("Tesla K80 | NVIDIA-SMI 450.80.02    Driver Version: 450.80.02    CUDA Version: 11.0\nnumba.cuda.cudadrv.driver."
     "LinkerError: [222] Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION\nptxas application ptx "
     "input, line 9; fatal   : Unsupported .version 7.4; current version is '7.0'", "driver",
     ["470 or newer", "cudatoolkit=11.0"]),
    # an NGC container on an older host driver (the tag names its CUDA)
    ("docker run --gpus all nvcr.io/nvidia/tritonserver:24.08-py3 tritonserver --model-repository=/models\n"
     "Driver Version: 535.161.08   CUDA Version: 12.2\nE0912 model.py: CUDA error: the provided PTX was compiled with "
     "an unsupported toolchain.", "driver", ["560 or newer", "12.6", "23.08"]),
    # CuPy's error code on a torch box: the torch index for the driver
    ("torch 2.4.0+cu124, driver 525.85.12\ncupy.cuda.driver.CUDADriverError: CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the "
     "provided PTX was compiled with an unsupported toolchain.", "driver",
     ["550 or newer", "whl/cu118"]),
    # FasterTransformer's Triton backend, the compose log without the service name
    ("I0301 03:12:09.100 libfastertransformer.cc:307] Before Loading Model:\nterminate called after throwing an "
     "instance of 'std::runtime_error'\n  what():  [FT][ERROR] CUDA runtime error: the provided PTX was compiled with an "
     "unsupported toolchain. /workspace/build/fastertransformer_backend/build/_deps/repo-ft-src/src/cuda_utils.h:393",
     "driver", ["11.7", "515 or newer"]),
    # a Windows Studio driver of branch 580 breaking numba (another card, another wording)
    ("Windows 11, RTX 4080, NVIDIA Studio driver 581.15, numba 0.61.2\nd = cuda.to_device(img)\nOSError: exception: "
     "access violation reading 0x0000000000000000", "driver", ["576.88", "numba-cuda"]),
    # GroundingDINO installed without CUDA_HOME
    ("pip install -e . (GroundingDINO), torch 2.1.0+cu118\nfrom groundingdino import _C\nModuleNotFoundError: No "
     "module named 'groundingdino._C'", "rocm-libs-missing", ["CUDA 11.8 toolkit", "CUDA_HOME", "--no-build-isolation"]),
    # ColossalAI's JIT-era module names
    ("colossalai 0.3.4 installed with pip install .\nModuleNotFoundError: No module named 'colossalai._C.fused_optim'",
     "rocm-libs-missing", ["CUDA toolkit", "CUDA_EXT=1"]),
]

NEGATIVES = [
    # numba's driver variable naming libcuda itself, nothing missing: no rewrite of it
    ("export NUMBA_CUDA_DRIVER=/usr/lib/x86_64-linux-gnu/libcuda.so.1\nnumba -s shows the GPU", "driver library itself"),
    # a Linux box (no WSL) with numba's cuInit failing: not WSL's folder
    ("Ubuntu 22.04 server, A100\nnumba.cuda.cudadrv.driver.CudaAPIError: [100] Call to cuInit results in "
     "CUDA_ERROR_NO_DEVICE", "/usr/lib/wsl/lib"),
    # torch under WSL failing without any CUDA Python program: not numba's variable
    ("WSL2 Ubuntu, torch.cuda.is_available() False\nUserWarning: CUDA initialization: CUDA driver initialization "
     "failed, you might not have a CUDA gpu.", "NUMBA_CUDA_DRIVER"),
    # the standalone ptxas of an old toolkit refusing Triton's PTX: ptxas's reading, not the driver
    ("triton 3.1\nptxas /tmp/tmpabc.ptx, line 5; fatal   : Unsupported .version 8.4; current version is '8.2'",
     "update the NVIDIA driver"),
    # the numba JIT link on a driver that runs the PTX's CUDA (another failure): not a driver update
    ("Driver Version: 550.54.14   CUDA Version: 12.4\nLinkerError: [218] Call to cuLinkAddData results in "
     "UNKNOWN_CUDA_ERROR\nptxas application ptx input, line 12; error   : Entry function uses too much shared data",
     "update the NVIDIA driver"),
    # numba on a driver before branch 580 crashing: not the 580 roll-back
    ("Windows 10, Game Ready 566.36, numba 0.60\nOSError: exception: access violation reading 0x00000000000000A8",
     "576.88"),
    # branch 580 without numba (a game crash): not numba's row
    ("Game Ready 581.29 installed, Cyberpunk crashes: access violation in nvwgf2umx.dll", "numba-cuda"),
    # the package itself missing, not its extension
    ("ModuleNotFoundError: No module named 'colossalai'", "CUDA_EXT=1"),
    # an extension that imports but was built for another torch: not the toolkit
    ("ImportError: /venv/lib/python3.10/site-packages/detectron2/_C.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
     "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs", "FORCE_CUDA=1"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
