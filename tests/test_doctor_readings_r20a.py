"""doctor, round 20 (r20a): readings for missed training cases of AMD / ROCm / ZLUDA / Ollama / GPUStack / llama-box
threads: community rocBLAS builds for a Windows HIP SDK, Ollama's GPU discovery failing on an older Radeon (Vulkan), a
half-finished NVIDIA driver upgrade (apt --fix-broken), torch 2.4+ under ZLUDA (cuBLASLt), hipBLASLt without the arch
(TORCH_BLAS_PREFER_HIPBLASLT=0), ROCm's clang without libstdc++ headers, a ROCm library in its package's own folder, a
library installed outside the loader's path, a web UI's broken ZLUDA installer, a distribution's own rocBLAS, a source
build of Ollama without a GPU runner, a prebuilt CUDA program on Blackwell, Kubernetes' NVIDIA RuntimeClass not used,
CUDA's fastest-first numbering of mixed cards, the CUDA build of a program's tools on an AMD machine, page cache on a
unified-memory GPU, a Colab CPU runtime, Ollama's Vulkan runner on an iGPU, GPUStack's minor-number indices, a DKMS
module broken by a kernel update, and Segment Anything's memory. Each paste is written for its reading (another GPU,
tool, version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does
not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # LM Studio's ROCm runtime on a Radeon 880M under Windows, the HIP SDK's rocBLAS without the arch
    ("Windows 11, HIP SDK 6.2, Radeon 880M\nrocBLAS error: Cannot read C:\\Program Files\\AMD\\ROCm\\6.2\\bin\\rocblas\\"
     "library\\TensileLibrary.dat: No such file or directory for GPU arch : gfx1150", "arch-missing",
     ["rocblas.dll", "ROCmLibs"]),
    # Ollama 0.12.8 on an RX 6800 (gfx1030) whose discovery takes the desktop down
    ("Ollama 0.12.8 with ROCm on Ubuntu 24.04, RX 6650 XT\nlevel=INFO msg=\"discovering available GPUs\"\nthe whole "
     "system freezes during GPU discovery and I have to hard reset", "gpu-unsupported", ["Vulkan", "OLLAMA_VULKAN"]),
    # a 535 -> 550 upgrade stopped half-way on Ubuntu
    ("$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\nrebooted twice, same\n$ cat "
     "/proc/driver/nvidia/version\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 2024\n$ dpkg -l "
     "| grep nvidia-utils\nii  nvidia-utils-550   550.120-0ubuntu1   amd64   NVIDIA driver support binaries",
     "driver", ["--fix-broken", "550", "535"]),
    # ComfyUI-Zluda with torch 2.6 on an RX 7600
    ("ComfyUI-Zluda, Windows 10, RX 7600, torch 2.6.0+cu118\nRuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED "
     "when calling `cublasLtMatmul( ltHandle, computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor())`",
     "torch-build", ["DISABLE_ADDMM_CUDA_LT", "2.3.1"]),
    # a vLLM run on an MI50 whose torch routes matmuls to hipBLASLt
    ("vllm serve Qwen2.5-7B on MI50 (gfx906), ROCm 6.2\nrocblaslt warning: No paths matched /opt/rocm/lib/hipblaslt/"
     "library/*gfx906*co. Make sure that HIPBLASLT_TENSILE_LIBPATH is set correctly.\nRuntimeError: CUDA error: "
     "HIPBLAS_STATUS_NOT_SUPPORTED when calling `hipblasLtMatmul`", "arch-missing", ["TORCH_BLAS_PREFER_HIPBLASLT=0"]),
    # whisper.cpp's HIP build on Ubuntu 22.04 quoting the header error in prose
    ("building whisper.cpp with -DGGML_HIP=ON on Ubuntu 22.04 stops, hipcc says 'iostream' is fine but 'cmath' file "
     "not found", "rocm-libs-missing", ["libstdc++-12-dev"]),
    # an old ROCm 3.3 where rocBLAS sits in its own folder
    ("ROCm 3.3 on Ubuntu 18.04\n$ rocblas-bench -f gemm\nrocblas-bench: error while loading shared libraries: "
     "librocblas.so.0: cannot open shared object file: No such file or directory", "rocm-libs-missing", ["rocblas/lib", "LD_LIBRARY_PATH"]),
    # a Fedora spec that put libamdhip64 in /opt/hip/lib
    ("Fedora 40, my own spec file\nthe package installs libamdhip64.so to /opt/hip/lib, but that folder is not in the "
     "library path\nhipInfo: error while loading shared libraries: libamdhip64.so.6: cannot open shared object file: "
     "No such file or directory", "rocm-libs-missing", ["/usr/lib64", "ld.so.conf.d"]),
    # the A1111 AMD fork's installer raising on its own code
    ("webui-user.bat with COMMANDLINE_ARGS=--use-zluda, RX 6800\nFailed to install ZLUDA: 'NoneType' object is not "
     "subscriptable\nUsing CPU-only torch", "torch-build", ["stable-diffusion-webui-amdgpu"]),
    # Fedora's own rocBLAS against AMD's repo on an RX 5700 XT
    ("Fedora 40 with AMD's repo.radeon.com rocm packages, RX 5700 XT\nrocBLAS error: Cannot read /opt/rocm/lib/rocblas/"
     "library/TensileLibrary.dat: Illegal seek for GPU arch : gfx1010\nTensileLibrary_lazy_gfx1010.dat is missing",
     "arch-missing", ["Fedora 41", "rocblas"]),
    # an Ollama built from source on Linux with an RX 7900 XT, CPU only
    ("I built ollama from source (cmake -B build && go build .) on Arch, RX 7900 XT\nollama runs but only on the CPU\n"
     "level=INFO msg=\"inference compute\" library=cpu", "torch-build", ["install.sh", "ROCm"]),
    # GPUStack's llama-box on an RTX 5080 under Linux
    ("GPUStack 0.6 worker, RTX 5080\nllama-box: ggml_cuda_compute_forward: MUL_MAT failed\nCUDA error: no kernel image "
     "is available for execution on the device", "arch-missing", ["cuda-12.8", "v0.0.129"]),
    # rke2 with the NVIDIA RuntimeClass, Ray pods without GPUs
    ("rke2 cluster, kubectl get runtimeclass shows nvidia\nthe KubeRay worker pods do not see the GPU: nvidia-smi: "
     "command not found", "visibility", ["default-runtime", "runtimeClassName: nvidia"]),
    # vLLM's ggml-free CUDA list of mixed cards, a GPU picked in a UI
    ("LocalAI in docker, RTX 4090 + GTX 1080 Ti\nI selected the 4090 in the GPU selector but the model lands on the 1080 "
     "Ti\nDevice 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes\nDevice 1: NVIDIA GeForce GTX 1080 Ti, "
     "compute capability 6.1, VMM: yes", "visibility", ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "-e"]),
    # GPUStack on a Radeon box where the CUDA toolkit was also installed
    ("GPUStack worker on an AMD Radeon PRO W7900 box, ROCm 6.2\nvox-box: error while loading shared libraries: "
     "libcublas.so.12: cannot open shared object file: No such file or directory\nNVIDIA-SMI has failed because it "
     "couldn't communicate with the NVIDIA driver", "torch-build", ["download-tools --device rocm"]),
    # a DGX Spark refusing a model the page cache holds memory for
    ("DGX Spark (GB10), ollama 0.12.6\nError: model requires more system memory (101.2 GiB) than is available "
     "(98.7 GiB)\nfree -h shows 90G in buff/cache", "apu-memory", ["drop_caches"]),
    # a Colab notebook run from a MacBook
    ("running the Colab notebook for FramePack from my MacBook\nRuntimeError: No CUDA GPUs are available",
     "visibility", ["Change runtime type"]),
    # Ollama in a vendor's Vulkan image on a Radeon 890M
    ("docker run someone/ollama:0.9.0-vulkan on a Ryzen AI 9 HX 370 (Radeon 890M)\nmsg=\"offload to vulkan\" "
     "runner.vram=\"0 B\" runner.inference=vulkan\neverything runs on the CPU", "apu-memory", ["OLLAMA_VULKAN=1"]),
    # GPUStack with two identical H100s, indices swapped
    ("GPUStack v2.1.0 on Ubuntu 22.04, 2x NVIDIA H100\nthe dashboard shows GPU 0 busy but nvidia-smi shows GPU 1 "
     "running the model; the indexes are swapped", "visibility", ["GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY"]),
    # an nvidia DKMS module failing on a new kernel, the old kernel said to work
    ("amdgpu-dkms on Ubuntu 22.04 works fine with kernel 5.15.0-91 but not with 5.15.0-94\n/var/lib/dkms/amdgpu/"
     "6.3.6-1718217.22.04/build/amd/amdgpu/amdgpu_drv.c:123:5: error: implicit declaration of function 'drm_foo'",
     "driver", ["5.15.0-91", "apt-mark hold"]),
    # Segment Anything on a 6 GB laptop GPU
    ("SamAutomaticMaskGenerator with the vit_h checkpoint on an RTX 3060 Laptop (6 GB)\ntorch.OutOfMemoryError: CUDA out "
     "of memory. Tried to allocate 1.20 GiB", "out-of-memory", ["vit_l", "points_per_batch"]),
]

NEGATIVES = [
    # ZLUDA with torch 2.3.1 already: not the cuBLASLt reading
    ("ZLUDA, RX 6600, torch 2.3.1+cu118\nRuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling "
     "`cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`", "DISABLE_ADDMM_CUDA_LT"),
    # a driver mismatch with no package listing: no --fix-broken
    ("$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch", "--fix-broken"),
    # the installer failing for a network reason: no fork
    ("webui.bat --use-zluda\nFailed to install ZLUDA: HTTPSConnectionPool(host='github.com', port=443): Read timed out.",
     "amdgpu-forge"),
    # a TensileLibrary for gfx1010 missing on Ubuntu: no Fedora
    ("Ubuntu 22.04, ROCm 6.1, RX 5700 XT\nrocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: "
     "Illegal seek for GPU arch : gfx1010", "Fedora 41"),
    # the official Ollama on the CPU: no source build reading
    ("curl -fsSL https://ollama.com/install.sh | sh\nollama runs only on the CPU, RTX 3060\nlevel=INFO library=cpu",
     "go build"),
    # llama-box on an RTX 4090: not the Blackwell reading
    ("llama-box on RTX 4090\nCUDA error: no kernel image is available for execution on the device", "v0.0.129"),
    # two identical cards in CUDA's list: no device order
    ("Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes\nDevice 1: NVIDIA GeForce RTX 3090, compute "
     "capability 8.6, VMM: yes\nI selected GPU 1", "CUDA_DEVICE_ORDER"),
    # libcudart missing on an NVIDIA machine: not the AMD reading
    ("RTX 3090, llama-box: error while loading shared libraries: libcudart.so.12: cannot open shared object file",
     "download-tools --device rocm"),
    # an OOM on a discrete card: no drop_caches
    ("Ollama on RTX 4060\nError: model requires more system memory (40.0 GiB) than is available (12.3 GiB)",
     "drop_caches"),
    # a local notebook without a GPU: no Colab menu
    ("jupyter notebook on my laptop\nRuntimeError: Found no NVIDIA driver on your system", "Change runtime type"),
    # Ollama's Vulkan on a discrete card using its memory: no iGPU reading
    ("ollama 0.13.0 OLLAMA_VULKAN=1, RX 7900 XTX\nrunner.vram=\"20.1 GiB\" runner.inference=vulkan", "0 B"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
