"""doctor, round 20 (r20c): readings for missed training cases of Python packages, wheels, ABI mismatches and extension
builds: an optional compiled package (flash-attn, apex) built against another torch, torch's detected-CUDA mismatch
with a torch for the toolkit, an Intel Python under Rosetta on Apple silicon, conda's CPU build of a CUDA package, a
Kokkos arch option for another GPU, onnxruntime-gpu's cuDNN 9 beside torch's cuDNN 8, TORCH_CUDA_ARCH_LIST beyond the
nvcc, a oneAPI library without setvars.sh, Metal's wired-memory share, jax's CUDA plugin and pip cuBLAS, OpenMMLab's
mmcv range and _ext symbols, an extension's wheels before Blackwell, nvcc's Visual Studio range, an old AutoGPTQ, a
torch CUDA older than the GPU, spconv's per-CUDA cumm and CMake's missing CUDA toolset. Each paste is written for its
reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each reading
out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # flash-attn's extension against another torch, under transformers' training
    ("python train.py --model qwen2\nImportError: /home/u/.venv/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-"
     "311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\ncan I run without flash attention?",
     "abi-mismatch", ["pip uninstall flash_attn", "sdpa"]),
    # apex's fused Adam extension left from an older torch
    ("ImportError: /usr/local/lib/python3.11/dist-packages/amp_C.cpython-311-x86_64-linux-gnu.so: undefined "
     "symbol: _ZN3c1015SmallVectorBaseIjE8grow_podEPKvmm\nimport apex", "abi-mismatch", ["pip uninstall apex"]),
    # tiny-cuda-nn style build under torch 2.1+cu121 with a CUDA 11.8 nvcc
    ("pip install git+https://github.com/NVlabs/nvdiffrast\nRuntimeError:\nThe detected CUDA version (11.8) mismatches "
     "the version that was used to compile\nPyTorch (12.1). Please make sure to use the same CUDA versions.",
     "abi-mismatch", ["pip uninstall torch", "whl/cu118", "pytorch-cuda=11.8"]),
    # mlx-lm on an M3 MacBook Air whose Python reports x86_64
    ("MacBook Air M3, macOS 14.5\n$ pip install mlx-lm\nERROR: Could not find a version that satisfies the requirement "
     "mlx-lm (from versions: none)\nERROR: No matching distribution found for mlx-lm", "wheel-platform",
     ["Rosetta", "arm64", "platform.machine()"]),
    # torch saying MPS is unavailable on an M2 Max with an Intel conda
    ("M2 Max, torch 2.3.1\n>>> torch.backends.mps.is_available()\nFalse\nplatform.machine() says x86_64 in my "
     "conda python", "wheel-platform", ["Rosetta", "native arm64"]),
    # conda-forge giving the CPU pytorch build
    ("$ mamba install pytorch torchvision -c conda-forge\n  + pytorch   2.3.1  cpu_generic_py312h2b3e8a5_0  conda-forge\n"
     "torch.cuda.is_available() is False on my RTX 4070 (CUDA 12.4 driver)", "torch-build", ["'pytorch=*=*cuda*'"]),
    # Kokkos configured for an RTX 30 card on an A100
    ("NVIDIA A100-SXM4-80GB\ncmake -DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_AMPERE86=ON ..\nKokkos::Cuda::initialize "
     "ERROR: likely mismatch of architecture", "arch-missing", ["Kokkos_ARCH_AMPERE80"]),
    # onnxruntime-gpu 1.20 beside torch 2.2's cuDNN 8.9 under insightface
    ("pip list: torch 2.2.2, nvidia-cudnn-cu12==8.9.2.26, onnxruntime-gpu==1.20.1\n[E:onnxruntime:Default, "
     "provider_bridge_ort.cc:1862] Failed to load library libonnxruntime_providers_cuda.so with error: libcudnn.so.9: "
     "cannot open shared object file: No such file or directory", "abi-mismatch",
     ["onnxruntime-gpu==1.18.0", "onnxruntime-cuda-12", "torch to 2.4"]),
    # a Dockerfile's arch list beyond CUDA 11.3
    ("ENV TORCH_CUDA_ARCH_LIST=\"7.5 8.0 8.6 8.9+PTX\"\nnvcc: Cuda compilation tools, release 11.3, V11.3.109\n"
     "ValueError: Unknown CUDA arch (8.9+PTX) or GPU not supported", "arch-missing",
     ["TORCH_CUDA_ARCH_LIST=\"6.0 6.1 7.0 7.5 8.0 8.6+PTX\""]),
    # intel-extension-for-pytorch on an Arc A770 missing oneAPI's SYCL runtime
    ("Arc A770, ipex 2.1.10+xpu\nOSError: libsycl.so.7: cannot open shared object file: No such file or directory",
     "rocm-libs-missing", ["setvars.sh"]),
    # Ollama-free MLX run on a 128 GB M4 Max that crawls
    ("MacBook Pro M4 Max 128GB unified memory, mlx_lm.generate with a 123B Q8 model: about 0.3 tokens/s and GPU "
     "usage near 0%, it seems to run on the CPU", "apu-memory", ["iogpu.wired_limit_mb", "114688"]),
    # jax's plugin failing on cuFFT, no fresh install shown
    ("  File \".../jax_plugins/xla_cuda12/__init__.py\", line 199, in _check_cuda_versions\nRuntimeError: Unable to "
     "load cuFFT. Is it installed?\nAn NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not "
     "installed. Falling back to cpu.", "rocm-libs-missing", ["jax-cuda12-plugin", "jax[cuda12]"]),
    # brax training with jax 0.6.1 and its cuSolver handle
    ("brax ppo train, jax==0.6.1\njaxlib._jax.XlaRuntimeError: INTERNAL: jaxlib/gpu/solver_handle_pool.cc:37: operation "
     "gpusolverDnCreate(&handle) failed: cuSolver internal error", "wheel-platform", ["nvidia-cublas-cu12>=12.9"]),
    # mmseg's mmcv check with mmcv 1.x ranges
    ("AssertionError: MMCV==1.3.0 is used but incompatible. Please install mmcv>=1.3.13, <=1.8.0.\ntorch 1.10.1+cu113",
     "wheel-platform", ["mmcv-full==1.7.2", "download.openmmlab.com/mmcv/dist/cu113/torch1.10.0"]),
    # mmcv 2.0's ops failing under torch 2.0.1+cu118
    ("from mmcv.ops import nms\nImportError: /opt/conda/lib/python3.10/site-packages/mmcv/_ext.cpython-310-x86_64-linux-"
     "gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs\nmmcv==2.0.1, torch 2.0.1+cu118",
     "abi-mismatch", ["download.openmmlab.com/mmcv/dist/cu118/torch2.0", "mmcv==2.0.1"]),
    # pytorch3d on an RTX 5080 with stable torch
    ("RTX 5080, is there a pytorch3d wheel for it? pip install pytorch3d -f https://dl.fbaipublicfiles.com/pytorch3d/"
     "packaging/wheels/py310_cu121_pyt241/download.html gives no kernel image", "arch-missing",
     ["whl/cu128", "pip install -e ."]),
    # VS 2026 with a CUDA that accepts 2017-2022
    ("Visual Studio 2026 installed\nhost_config.h(164): fatal error C1189: #error:  -- unsupported Microsoft Visual "
     "Studio version! Only the versions between 2017 and 2022 (inclusive) are supported!", "abi-mismatch",
     ["Visual Studio 2022"]),
    # auto-gptq 0.6.0 without its kernels under torch 2.3
    ("auto-gptq==0.6.0, torch 2.3.0\nCUDA extension not installed.\nOSError: libcudart.so.11.0: cannot open shared "
     "object file: No such file or directory", "abi-mismatch", ["auto-gptq==0.7.1"]),
    # an H100 with torch built for CUDA 11.3 (an RTX 4090 would run its sm_80 code)
    ("H100 80GB, torch 1.12.1 with CUDA 11.3: training does not work, nothing happens on the GPU", "arch-missing",
     ["CUDA 11.8"]),
    # spconv under torch cu118 with an old cumm
    ("import spconv.pytorch\nImportError: cannot import name 'ConvAlgo' from 'cumm.conv.main'\ntorch 2.0.1+cu118, "
     "spconv-cu118 2.3.6", "wheel-platform", ["cumm-cu118"]),
    # CMake on Windows with VS 2022 and CUDA 12.4
    ("cmake . -B build -G \"Visual Studio 17 2022\"\nCMake Error at CMakeDetermineCompilerId.cmake:491 (message):\n  No "
     "CUDA toolset found.", "rocm-libs-missing", ["Visual Studio Integration", "MSBuildExtensions"]),
]

NEGATIVES = [
    # a flash-attn symbol on ROCm's own build: still a rebuild reading, never apex's
    ("ImportError: flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
     "pip uninstall apex"),
    # an Intel Mac: no Rosetta reading for its missing mlx
    ("MacBook Pro 2019 Intel i9\nERROR: No matching distribution found for mlx", "Rosetta"),
    # conda's CUDA build already chosen: nothing to change
    ("  + pytorch 2.3.1 cuda120_py312h26b3cf7_300 conda-forge\nRuntimeError: CUDA error: out of memory", "=*=*cuda*"),
    # Kokkos built for the GPU it runs on
    ("Tesla V100-SXM2-32GB\n-DKokkos_ARCH_VOLTA70=ON\nSegmentation fault (core dumped)", "instead of -DKokkos_ARCH"),
    # onnxruntime-gpu 1.18 on CUDA 11: not the cuDNN 9 pair
    ("onnxruntime-gpu==1.18.0, nvidia-cudnn-cu11==8.9.5\nlibcublas.so.11: cannot open shared object file",
     "onnxruntime-cuda-12"),
    # a distribution's libtbb missing in Blender: no oneAPI
    ("blender: error while loading shared libraries: libtbb.so.12: cannot open shared object file", "setvars.sh"),
    # a Mac whose model runs well: no wired limit
    ("Mac Studio M2 Ultra 192GB, LM Studio with a 70B Q4 model, 12 tokens/s, works fine", "iogpu.wired_limit_mb"),
    # jax's cuSolver on 0.4.30: not the 0.6.1 cuBLAS cap
    ("jax==0.4.30\nRuntimeError: jaxlib/gpu/solver_kernels.cc:45: operation gpusolverDnCreate(&handle) failed: "
     "cuSolver internal error", "nvidia-cublas-cu12>=12.9"),
    # a torch built for a CUDA the GPU's generation has: no floor reading
    ("RTX 3090, torch 1.9.0 with CUDA 11.1, loss is nan after 10 steps", "or newer (the driver must support it)"),
    # auto-gptq's last release: no upgrade to itself
    ("auto-gptq==0.7.1\nCUDA extension not installed.", "auto-gptq==0.7.1 --no-cache-dir"),
    # VS 2019 refused by a CUDA accepting 2017-2022: not the range reading
    ("Visual Studio 2019\nunsupported Microsoft Visual Studio version! Only the versions between 2017 and 2022 "
     "(inclusive) are supported!", "install Visual Studio 2017"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
