"""doctor, round 17 (t17c): the situations the local apps' and servers' own troubleshooting, FAQ and install pages list
with the fix they accept - Ollama (troubleshooting, GPU, FAQ, Linux, Windows, Docker pages), llama.cpp's build page,
vLLM's installation and troubleshooting pages, SGLang's AMD and troubleshooting pages, ComfyUI's README, LM Studio's
runtimes page, koboldcpp's wiki and text-generation-webui's wiki. Each paste retells a page's situation in other words,
on another card or release than the probe that found it (/work/notes/t17c_situations.md); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Ollama's GPU page: an NVIDIA GPU lost after suspend / resume
    ("Fedora 41 desktop, RTX 3070, driver 565.77, ollama 0.6.2\nsince the PC woke up from suspend ollama runs on the "
     "CPU only, a reboot fixes it\nnvidia-smi lists the card fine", "driver",
     ["sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm", "systemctl stop ollama", "NVreg_PreserveVideoMemoryAllocations=1"]),
    # the same under torch
    ("Ubuntu 24.04 laptop, RTX 4070 Laptop GPU\nafter resuming from sleep torch.cuda.is_available() returns False\n"
     "CUDA unknown error - this may be due to an incorrectly set up environment", "driver", ["modprobe nvidia_uvm"]),
    # Ollama's GPU page: an AMD card off ROCm's list on Linux
    ("ollama 0.5.4 on Ubuntu 22.04, Radeon RX 6700 XT\nlevel=WARN source=amd_linux.go:378 msg=\"amdgpu is not supported "
     "(supported types:[gfx1030 gfx1100 gfx1101 gfx1102 gfx906 gfx908 gfx90a gfx942])\" gpu_type=gfx1031 gpu=0\n"
     "level=INFO source=gpu.go:386 msg=\"no compatible GPUs were discovered\"", "arch-missing",
     ["HSA_OVERRIDE_GFX_VERSION=10.3.0", "systemctl"]),
    # Ollama's docker page: the NVIDIA container runtime missing
    ("docker run -d -p 11434:11434 --name ollama ollama/ollama:0.5.1\nhost: 2x RTX A5000, driver 550.90\n"
     "msg=\"no compatible GPUs were discovered\" in docker logs ollama, so it runs on CPU", "device-access",
     ["nvidia-ctk runtime configure", "--gpus"]),
    # Ollama's docker page: the ROCm image without its devices
    ("podman run -d -p 11434:11434 docker.io/ollama/ollama:rocm on a Radeon RX 7600 (Debian 12)\n"
     "level=WARN msg=\"ollama recommends running the https://www.amd.com/en/support/linux-drivers\" "
     "error=\"amdgpu version file missing: /sys/module/amdgpu/version stat /sys/module/amdgpu/version: no such file "
     "or directory\"\nlevel=INFO source=gpu.go:386 msg=\"no compatible GPUs were discovered\"", "device-access",
     ["--device=/dev/kfd", "--device=/dev/dri"]),
    # Ollama's troubleshooting page: docker's systemd cgroup driver takes the GPU away after a while
    ("ollama container with --gpus=all on an RTX 4090 host (Ubuntu 24.04)\nafter a day it switched to the CPU\n"
     "nvidia-smi in the container now says Failed to initialize NVML: Unknown Error", "device-access",
     ["native.cgroupdriver=cgroupfs"]),
    # Ollama's troubleshooting page: /tmp mounted noexec
    ("ollama on Debian 12 with a CIS-hardened image, RTX A2000\nError: llama runner process has terminated: fork/exec "
     "/tmp/ollama2290119044/runners/cpu_avx2/ollama_llama_server: permission denied", "device-access",
     ["OLLAMA_TMPDIR=", "systemctl edit ollama.service"]),
    # Ollama's troubleshooting page: the render / video groups on AMD
    ("ollama serve as the ollama user, Radeon PRO W7800, Ubuntu 22.04\nlevel=WARN source=amd_linux.go:443 "
     "msg=\"amdgpu detected, but no permission to access /dev/kfd\" error=\"open /dev/kfd: permission denied\"",
     "device-access", ["usermod -aG render,video"]),
    # Ollama's GPU page (older): SELinux keeps containers from the GPU devices
    ("Rocky Linux 9, SELinux enforcing, podman run --device /dev/kfd --device /dev/dri ollama/ollama:rocm\n"
     "Radeon RX 7900 XTX\ninside the container: Unable to open /dev/kfd read-write: Permission denied",
     "device-access", ["setsebool -P container_use_devices=1", "label=disable"]),
    # Ollama's troubleshooting page: pick the CPU runner / hide the GPUs
    ("ollama on Windows 10 with a GTX 1660 Super keeps crashing in the GPU runner\nhow do I force ollama to use the "
     "CPU only, to check the model file?", "visibility", ["CUDA_VISIBLE_DEVICES=-1", "OLLAMA_LLM_LIBRARY", "num_gpu 0"]),
    # Ollama's GPU page: several NVIDIA GPUs, one wanted
    ("ollama with an RTX 4090 and an RTX 3060 in one box\nnvidia-smi -L\nGPU 0: NVIDIA GeForce RTX 4090 (UUID: "
     "GPU-aa11)\nGPU 1: NVIDIA GeForce RTX 3060 (UUID: GPU-bb22)\nhow can I make ollama use only the 4090?",
     "visibility", ["CUDA_VISIBLE_DEVICES=GPU-aa11", "systemctl edit ollama.service"]),
    # Ollama's GPU page: the iGPU beside an AMD card
    ("ollama on Fedora 40 with a Ryzen 9 7940HS iGPU (gfx1103) and an RX 7700 XT\nollama tries to load onto both and "
     "crashes", "visibility", ["ROCR_VISIBLE_DEVICES", "iGPU"]),
    # Ollama's GPU page: a card below compute capability 5.0
    ("ollama 0.7.0 on Ubuntu 22.04, Tesla K80 (Kepler), driver 470.239\nlevel=INFO source=gpu.go:386 msg=\"no "
     "compatible GPUs were discovered\"", "gpu-unsupported", ["compute capability"]),
    # Ollama's GPU page: an AMD card its Windows ROCm build does not list
    ("Ollama 0.9.0 on Windows 11, Radeon RX 6650 XT (gfx1032)\nthe GPU is not used, ollama ps shows 100% CPU",
     "arch-missing", ["OLLAMA_VULKAN"]),
    # Ollama's WSL notes: a Linux NVIDIA driver installed inside WSL
    ("WSL2 Ubuntu 22.04, RTX 3080 Ti, I ran sudo apt install nvidia-driver-535 inside WSL\nnvidia-smi: NVIDIA-SMI has "
     "failed because it couldn't communicate with the NVIDIA driver\nollama falls back to CPU", "wsl",
     ["Linux driver in WSL"]),
    # llama.cpp's build page: built without a GPU backend
    ("cmake -B build && cmake --build build -j on Arch, RTX 3090 with CUDA 12.6\n./build/bin/llama-server -m "
     "mistral-7b.Q5_K_M.gguf -ngl 40\nwarning: no usable GPU found, --gpu-layers option will be ignored",
     "torch-build", ["-DGGML_CUDA=ON"]),
    # llama.cpp's build page: the toolkit older than the card
    ("building llama.cpp with -DGGML_CUDA=ON, toolkit 12.3 on Windows 11, RTX 5070 Ti\nnvcc fatal   : Unsupported gpu "
     "architecture 'compute_120'", "arch-missing", ["CUDA 12.8"]),
    # llama.cpp's build page: no nvcc found
    ("cmake -B build -DGGML_CUDA=ON on Debian 12 with an RTX 4060 and the 550 driver\n-- Could not find nvcc, please "
     "set CUDAToolkit_ROOT.", "rocm-libs-missing", ["cuda-toolkit", "CUDAToolkit_ROOT"]),
    # llama.cpp's build page: the HIP build for another target
    ("llama.cpp built with -DGGML_HIP=ON -DAMDGPU_TARGETS=gfx1100, card is a Radeon RX 9070 XT, ROCm 6.4.1\n"
     "ggml_cuda_init: found 1 ROCm devices:\n  Device 0: AMD Radeon RX 9070 XT, gfx1201 (0x1201), VMM: no\n"
     "ROCm error: invalid device function", "arch-missing", ["gfx1201"]),
    # llama.cpp's build page: an RDNA2 card off the list
    ("llama-cli HIP build on a Radeon RX 6600 (gfx1032), ROCm 6.0, Ubuntu 22.04\nrocBLAS error: Cannot read "
     "/opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory for GPU arch : gfx1032",
     "arch-missing", ["HSA_OVERRIDE_GFX_VERSION=10.3.0"]),
    # llama.cpp's build page: an APU's small carve-out
    ("llama.cpp with ROCm on a Ryzen AI 9 HX 370 (Radeon 890M, gfx1150), 64 GB RAM, Ubuntu 24.04\n"
     "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7800.00 MiB on device 0: cudaMalloc failed: out of memory",
     "apu-memory", ["GGML_CUDA_ENABLE_UNIFIED_MEMORY=1"]),
    # llama.cpp's FAQ: a model larger than the card
    ("llama-server -m Qwen2.5-72B-Instruct-Q4_K_M.gguf -ngl 999 on an RTX 3090\nggml_backend_cuda_buffer_type_alloc_buffer: "
     "allocating 44000.00 MiB on device 0: cudaMalloc failed: out of memory", "out-of-memory",
     ["-ngl", "GGML_CUDA_ENABLE_UNIFIED_MEMORY=1"]),
    # llama.cpp's build page: the Vulkan build without its SDK
    ("cmake -B build -DGGML_VULKAN=1 on Ubuntu 22.04 with a Radeon RX 580\nCould NOT find Vulkan (missing: "
     "Vulkan_LIBRARY Vulkan_INCLUDE_DIR glslc)", "rocm-libs-missing", ["glslc"]),
    # vLLM's troubleshooting page: CUDA initialised before the workers fork
    ("vllm 0.5.3 with tensor_parallel_size=4 on 4x A10G, my script calls torch.cuda.device_count() first\n"
     "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
     "'spawn' start method", "device-access", ["VLLM_WORKER_MULTIPROC_METHOD=spawn"]),
    # vLLM's troubleshooting page: spawn without a __main__ guard
    ("vllm 0.9.1, 4x H100, running offline inference from a plain script\nRuntimeError:\n        An attempt has been "
     "made to start a new process before the\n        current process has finished its bootstrapping phase.",
     "device-access", ["if __name__ == \"__main__\""]),
    # vLLM's troubleshooting page: the KV cache smaller than the context
    ("vllm serve Qwen/Qwen2.5-14B-Instruct on 1x A100 40GB\nValueError: The model's max seq len (32768) is larger than "
     "the maximum number of tokens that can be stored in KV cache (21456). Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine.", "out-of-memory", ["--max-model-len"]),
    # vLLM's GPU install page: bf16 on a card before Ampere
    ("vllm on a Tesla V100-SXM2-32GB\nValueError: Bfloat16 is only supported on GPUs with compute capability of at "
     "least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly "
     "setting the `dtype` flag in CLI, for example: --dtype=half.", "precision", ["--dtype half"]),
    # vLLM's GPU install page: another torch installed over vLLM's
    ("vllm==0.8.5 worked, then I ran pip install torch==2.7.0 for xformers\nImportError: /opt/conda/lib/python3.12/"
     "site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "abi-mismatch",
     ["fresh environment", "vllm==0.8.5", "use_existing_torch.py"]),
    # vLLM's troubleshooting page: a tensor-parallel hang
    ("vllm serve --tensor-parallel-size 2 on 2x RTX 3090 without NVLink hangs after\nINFO custom_all_reduce_utils.py:"
     "244 reading GPU P2P access cache from /home/u/.cache/vllm/gpu_p2p_access_cache_for_0,1.json", "multi-gpu-transport",
     ["NCCL_P2P_DISABLE=1"]),
    # vLLM's GPU install page: the PyPI wheel on an AMD GPU
    ("uv pip install vllm on an MI300X node, ROCm 6.3\nvllm serve meta-llama/Llama-3.1-8B\nRuntimeError: Failed to "
     "infer device type", "torch-build", ["rocm/vllm", "PYTORCH_ROCM_ARCH=gfx942"]),
    # vLLM's ROCm install page: the Triton flash attention on a Radeon card
    ("vllm 0.6.6 ROCm build, Radeon PRO W7900 (gfx1100), ROCm 6.3\ntriton.runtime.errors.OutOfResources: out of "
     "resource: shared memory, Required: 131072, Hardware limit: 65536", "attention",
     ["VLLM_USE_TRITON_FLASH_ATTN=0"]),
    # SGLang's troubleshooting page: CUDA graph capture out of memory
    ("python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-32B-Instruct-AWQ on an RTX 4090\nCapture cuda graph "
     "failed: CUDA out of memory. Tried to allocate 512.00 MiB", "out-of-memory", ["--mem-fraction-static"]),
    # SGLang's troubleshooting page: prefill of long prompts out of memory
    ("sglang 0.4.6 serving Llama-3.1-8B on an L40S, prompts of 100k tokens\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 6.00 GiB", "out-of-memory", ["--chunked-prefill-size"]),
    # SGLang's AMD page: the container without the GPU devices
    ("docker run -it --ipc=host --shm-size 16g lmsysorg/sglang:v0.4.5-rocm630 on 8x MI250X\npython3 -m "
     "sglang.launch_server --model Qwen/Qwen2-72B --tp 8\nRuntimeError: No HIP GPUs are available", "device-access",
     ["--device=/dev/kfd"]),
    # ComfyUI's README: a CPU torch on an NVIDIA card
    ("ComfyUI from git on Ubuntu 24.04, RTX 3060 12GB\npython main.py --listen\nAssertionError: Torch not compiled "
     "with CUDA enabled", "torch-build", ["whl/cu"]),
    # ComfyUI's README: an RDNA2 card off ROCm's list
    ("ComfyUI on Arch, RX 6750 XT, torch 2.6.0+rocm6.2.4\npython main.py dies with Segmentation fault (core dumped) "
     "when the KSampler starts\nrocminfo: gfx1031", "arch-missing", ["HSA_OVERRIDE_GFX_VERSION=10.3.0"]),
    # ComfyUI's README: DirectML for an AMD card on Windows
    ("ComfyUI on Windows 11 with a Radeon RX 7600, torch from pytorch.org\nRuntimeError: Found no NVIDIA driver on your "
     "system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/"
     "index.aspx", "torch-build", ["--directml"]),
    # ComfyUI's README: a small card
    ("ComfyUI on an RTX 3050 4GB laptop, Flux dev fp8\ntorch.OutOfMemoryError: Allocation on device 0 would exceed "
     "allowed memory. (out of memory)", "out-of-memory", ["--lowvram"]),
    # ComfyUI's README: RDNA3's experimental attention
    ("ComfyUI on a Radeon RX 7800 XT, torch 2.5.1+rocm6.2, Ubuntu 22.04\nUserWarning: Memory Efficient attention on "
     "Navi31 GPU is still experimental. Enable it with TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.", "attention",
     ["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1"]),
    # LM Studio's runtimes page: the CPU runtime on a machine with a GPU
    ("LM Studio 0.3.14 on Ubuntu 24.04 with an RTX 4060 Ti\ntokens come slowly and nvidia-smi shows no load\n"
     "Runtime: CPU llama.cpp (Linux) v1.21.0", "torch-build", ["CUDA 12 llama.cpp", "Ctrl+Shift+R"]),
    # the same on an AMD card
    ("LM Studio on Windows 10 with a Radeon RX 6800 XT, the selected runtime is CPU llama.cpp v1.18\nGPU usage "
     "stays at 0%", "torch-build", ["Vulkan llama.cpp"]),
    # LM Studio's runtimes page: no runtime for the format
    ("LM Studio 0.3.5 AppImage on Fedora 40, Radeon RX 7900 XT\n🥲 Failed to load the model\nError: No LM Runtime "
     "found for model format 'gguf'!", "rocm-libs-missing", ["Ctrl+Shift+R"]),
    # koboldcpp's wiki: an AMD card given the CUDA switch
    ("koboldcpp 1.75 on Windows 10, Radeon RX 7800 XT\nkoboldcpp.exe --usecublas --gpulayers 43 --model mythomax.gguf\n"
     "Warning: CuBLAS library file not found. Non-BLAS library will be used.", "torch-build", ["--usevulkan"]),
    # koboldcpp's wiki: a CPU without AVX2
    ("koboldcpp 1.82 on Linux, old i7-3770 with a GTX 1080\n./koboldcpp-linux-x64 --usecublas --gpulayers 99\n"
     "Illegal instruction (core dumped)", "gpu-unsupported", ["--noavx2"]),
    # llama.cpp's build page: the same on llama.cpp's release binary
    ("llama.cpp b4500 release binary on a Xeon X5670 server with a Tesla P40\n./llama-server -m model.gguf\n"
     "Illegal instruction", "gpu-unsupported", ["-DGGML_AVX2=OFF"]),
    # text-generation-webui's wiki: an RDNA2 card off ROCm's list
    ("text-generation-webui start_linux.sh, AMD option, Radeon RX 6600 XT on Ubuntu 22.04\n"
     "\"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\"", "arch-missing",
     ["HSA_OVERRIDE_GFX_VERSION=10.3.0"]),
    # text-generation-webui's WSL page: libcuda under WSL
    ("oobabooga text-generation-webui under WSL2 (Ubuntu 24.04), RTX 4080\nCould not load library libcudnn_ops_infer."
     "so.8. Error: libcuda.so: cannot open shared object file: No such file or directory", "wsl",
     ["/usr/lib/wsl/lib"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # a SLURM job suspended and resumed: no sleeping computer
    ("our SLURM job was suspended and after resume the training runs on CPU\nRTX A6000 nodes, scontrol resume 1234",
     "nvidia_uvm"),
    # suspend said on an AMD machine
    ("after suspend the RX 7900 XTX is not used by ollama anymore, it runs on CPU\nUbuntu 24.04, ROCm 6.3",
     "nvidia_uvm"),
    # suspend said, the GPU still works
    ("after resume from sleep my RTX 3080 works fine in ollama, how do I set the context length?",
     "enable nvidia-suspend"),
    # SELinux said to be disabled
    ("SELinux is disabled on this Rocky 9 host\npodman run --device /dev/kfd ollama/ollama:rocm\nUnable to open "
     "/dev/kfd read-write: Permission denied", "container_use_devices"),
    # SELinux without a container
    ("Fedora 40, SELinux enforcing, ollama serve as my user\nopen /dev/kfd: permission denied", "container_use_devices"),
    # LM Studio with a GPU runtime selected
    ("LM Studio on Windows 11, RTX 4070\nRuntime: CUDA 12 llama.cpp (Windows) v1.21.0\nhow do I raise the context "
     "length?", "Ctrl+Shift+R"),
    # an illegal instruction from the GPU side
    ("llama.cpp HIP build with HSA_OVERRIDE_GFX_VERSION=11.0.0 on a Radeon 780M\nIllegal instruction (core dumped)",
     "--noavx2"),
    # an illegal instruction outside the ggml apps
    ("python train.py on an old Xeon with torch 2.3\nIllegal instruction (core dumped)", "-DGGML_AVX2=OFF"),
    # Ollama asked about the GPU, not the CPU
    ("ollama uses the CPU instead of my RTX 3060, why?\nlevel=INFO source=gpu.go:386 msg=\"no compatible GPUs were "
     "discovered\"", "OLLAMA_LLM_LIBRARY"),
    # Ollama asked to spread over all its GPUs: not the keep-to-some reading
    ("ollama on 2x RTX 3090, the model only loads on one GPU, how do I make it use both?", "UUIDs are steadier"),
    # the GPU asked for instead of the CPU, several old cards: not a subset of the GPUs
    ("my box has 2 Tesla K40m cards, can ollama only use the gpu for a model? it runs on cpu\nollama 0.6.1, Ubuntu 20.04",
     "UUIDs are steadier"),
    # a backend said to be the only one used on several cards: not a subset of the GPUs
    ("ollama 0.13 only uses Vulkan on my 2x RTX 4060 Ti box, much slower than before", "UUIDs are steadier"),
    # vLLM on NVIDIA with pip
    ("pip install vllm on 2x RTX 4090, Ubuntu 22.04\nRuntimeError: Failed to infer device type", "rocm/vllm"),
    # vLLM's ROCm wheel from AMD's index
    ("pip install vllm --extra-index-url https://wheels.vllm.ai/rocm/ on an MI300X\nRuntimeError: Failed to infer "
     "device type", "rocm/vllm"),
    # an undefined symbol in vLLM without a torch swap
    ("pip install vllm==0.6.0 from source with CUDA 11.8\nImportError: vllm/_C.abi3.so: undefined symbol: "
     "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs", "use_existing_torch.py"),
    # a Triton error in vLLM on NVIDIA
    ("vllm 0.6.6 on an RTX 2080 Ti\ntriton.runtime.errors.OutOfResources: out of resource: shared memory, Required: "
     "98304, Hardware limit: 65536", "VLLM_USE_TRITON_FLASH_ATTN"),
    # SGLang's CUDA graph capture: not the prefill reading
    ("sglang on an L4, long prompts\nCapture cuda graph failed: CUDA out of memory. Tried to allocate 256.00 MiB",
     "--chunked-prefill-size"),
    # another program's temporary folder refused
    ("Error: fork/exec /home/me/bin/tool: permission denied", "OLLAMA_TMPDIR"),
    # a script with its guard, another multiprocessing error
    ("if __name__ == '__main__': main()\nRuntimeError: DataLoader worker (pid 123) is killed by signal: Killed.",
     "bootstrapping"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
