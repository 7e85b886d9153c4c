"""doctor, round 16 (issue 63): the local AI apps' own GPU messages (p16c). Ollama's server log (discovery of CUDA,
ROCm and Vulkan GPUs, its libraries, drivers and memory lines), llama.cpp's backends and build (Vulkan, SYCL, HIP,
CMake, backend modules), koboldcpp, whisper.cpp, the Stable Diffusion UIs (AUTOMATIC1111's Python check, Forge's CUDA
check, ComfyUI's allocator and comfy-kitchen lines, DirectML), CTranslate2 and onnxruntime, each pasted in another
wording or context than the probe that found it missing; the negatives keep the readings out of pastes they do not
fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the ROCm payload missing from a manual install
    ("sudo tar -C /usr -xzf ollama-linux-amd64.tgz\nollama serve\ntime=2025-01-09T08:00:01.000Z level=WARN "
     "source=amd_linux.go:354 msg=\"unable to verify rocm library: no suitable rocm found, falling back to CPU\"",
     "rocm-libs-missing", ["ollama-linux-amd64-rocm.tgz"]),
    # Windows: the bundled ROCm runtime not found
    ("PS C:\\> ollama serve\ntime=2024-09-12T21:03:44.120+02:00 level=WARN source=amd_windows.go:175 msg=\"amdgpu "
     "detected, but no compatible rocm library found.  Please install ROCm\"", "rocm-libs-missing", ["OllamaSetup.exe"]),
    # the rocm image started without /dev/kfd
    ("docker run -d -p 11434:11434 ollama/ollama:rocm\ntime=2024-11-02T10:00:00.000Z level=ERROR source=amd_linux.go:412 "
     "msg=\"amdgpu devices detected but permission problems block access: kfd driver not loaded.  If running in a "
     "container, remember to include '--device /dev/kfd --device /dev/dri'\"", "device-access", ["--device /dev/kfd"]),
    # a Ryzen APU with a 512 MiB carve-out
    ("Ryzen 7 7840HS, Radeon 780M\nlevel=INFO source=amd_linux.go:322 msg=\"unsupported Radeon iGPU detected skipping\" "
     "id=0 total=\"512.0 MiB\"", "apu-memory", ["UMA Frame Buffer"]),
    # the inbox amdgpu warning (the GPU still found)
    ("level=WARN source=amd_linux.go:61 msg=\"ollama recommends running the https://www.amd.com/en/support/download/"
     "linux-drivers.html\" error=\"amdgpu version file missing: /sys/module/amdgpu/version stat /sys/module/amdgpu/"
     "version: no such file or directory\"", "driver", ["inference compute", "amdgpu-install --usecase=dkms"]),
    # a driver upgrade without a reboot
    ("sudo apt upgrade  # nvidia-driver-550 -> 550.120\nlevel=WARN source=gpu.go:627 msg=\"version mismatch between "
     "driver and cuda driver library - reboot or upgrade may be required: library /usr/lib/x86_64-linux-gnu/"
     "libcuda.so.550.120\"", "driver", ["reboot", "/proc/driver/nvidia/version"]),
    # CUDA error 999 after the laptop woke up
    ("after resume from suspend ollama uses the CPU\nlevel=WARN source=gpu.go:623 msg=\"unknown error initializing cuda "
     "driver library /usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01: cuda driver library init failure: 999. see "
     "https://github.com/ollama/ollama/blob/main/docs/troubleshooting.md for more information\"", "driver",
     ["rmmod nvidia_uvm", "modprobe nvidia_uvm"]),
    # an old driver branch
    ("NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4\nlevel=WARN source=gpu.go:62 msg=\"old "
     "CUDA driver detected - please upgrade to a newer driver for best performance\" version=11.4", "driver", ["550"]),
    # a Kepler card skipped by Ollama's CUDA build
    ("ollama 0.13.1, Tesla K80\nlevel=INFO source=llama_server.go:301 msg=\"skipping CUDA device — compute capability "
     "not in compiled architectures\" id=GPU-5d1c compute=3.7", "gpu-unsupported", ["CMAKE_CUDA_ARCHITECTURES"]),
    # a gfx1031 card dropped by the newer discovery
    ("time=2026-03-01T10:00:00Z level=WARN source=amd.go:470 msg=\"dropping ROCm device — no rocblas support for gfx "
     "target\" device=\"AMD Radeon RX 6700 XT\" gfx_target=gfx1031 hint=\"set HSA_OVERRIDE_GFX_VERSION to map to a "
     "supported target\"", "arch-missing", ["HSA_OVERRIDE_GFX_VERSION=10.3.0", "systemctl"]),
    # Windows: Adrenalin without HIP 7
    ("Radeon RX 7800 XT, Adrenalin 24.3.1\nlevel=WARN source=amd.go:485 msg=\"AMD driver is too old. Update your AMD "
     "driver to enable GPU inference.\"", "driver", ["Adrenalin", "amdhip64_7.dll"]),
    # discovery hung on a ROCm 6 DKMS driver
    ("$ dkms status\namdgpu/6.8.5-2041575.22.04, 6.8.0-49-generic, x86_64: installed\nlevel=INFO source=runner.go:522 "
     "msg=\"failure during GPU discovery\" error=\"failed to finish discovery before timeout\"", "driver",
     ["ROCm 7", "amdgpu-install"]),
    # num_gpu set by hand in a Modelfile
    ("PARAMETER num_gpu 80\n$ ollama run mymodel\nError: 500 Internal Server Error: memory layout cannot be allocated "
     "with num_gpu = 80", "out-of-memory", ["num_gpu"]),
    # not one layer fits
    ("OLLAMA_DEBUG=1 ollama serve\nlevel=DEBUG source=server.go:969 msg=\"insufficient VRAM to load any model layers\"",
     "out-of-memory", ["num_ctx", "nvidia-smi"]),
    # another llama.cpp on PATH on Windows
    ("level=WARN source=runner.go:739 msg=\"potentially incompatible library detected in PATH\" location=\"C:\\Users\\me"
     "\\llama-b4100-bin-win-cuda\\ggml-base.dll\"", "abi-mismatch", ["PATH"]),
    # the Vulkan build in a container without /dev/dri
    ("docker run --rm -v $PWD:/models ghcr.io/ggml-org/llama.cpp:server-vulkan -m /models/q4.gguf -ngl 99\n"
     "ggml_vulkan: No devices found.\nload_tensors: offloaded 0/33 layers to GPU", "driver",
     ["vulkaninfo --summary", "/dev/dri"]),
    # backends built as modules, none beside the binary
    ("cmake -B build -DGGML_BACKEND_DL=ON -DGGML_CUDA=ON\ncp build/bin/llama-server /usr/local/bin/\n"
     "llama_model_load_from_file_impl: no backends are loaded. hint: use ggml_backend_load() or ggml_backend_load_all() "
     "to load a backend before calling this function", "rocm-libs-missing", ["ggml_backend_load_all", "same folder"]),
    # make on a current checkout
    ("~/src/llama.cpp$ make LLAMA_CUBLAS=1 -j8\nMakefile:6: *** The Makefile build is deprecated. Use the CMake build "
     "instead. For more details, see https://github.com/ggml-org/llama.cpp/blob/master/docs/build.md.  Stop.",
     "torch-build", ["cmake -B build -DGGML_CUDA=ON"]),
    # the Vulkan build without the SDK's loader
    ("cmake -B build -DGGML_VULKAN=1\n-- Could NOT find Vulkan (missing: Vulkan_LIBRARY Vulkan_INCLUDE_DIR glslc) "
     "(found version \"\")", "rocm-libs-missing", ["glslc", "libvulkan-dev"]),
    # the HIP build without ROCm's CMake path
    ("cmake -S . -B build -DGGML_HIP=ON -DGPU_TARGETS=gfx1100\nCMake Error at ggml/src/ggml-hip/CMakeLists.txt:41 "
     "(find_package):\n  Could not find a package configuration file provided by \"hip\" with any of the following names:"
     "\n  By not providing \"Findhip.cmake\" in CMAKE_MODULE_PATH", "rocm-libs-missing", ["hipconfig -l"]),
    # SYCL on an Arc card without oneAPI's environment
    ("./build/bin/llama-server -m q4.gguf -ngl 99   # Arc A770\nggml_sycl_init: found 0 SYCL devices:\n",
     "driver", ["setvars.sh", "sycl-ls"]),
    # the SYCL runtime not on the path
    ("$ ./bin/llama-bench -m model.gguf\n./bin/llama-bench: error while loading shared libraries: libsycl.so.8: cannot "
     "open shared object file: No such file or directory", "rocm-libs-missing", ["source /opt/intel/oneapi/setvars.sh"]),
    # a llama-cpp-python wheel for other GPUs
    ("pip install llama-cpp-python --extra-index-url https://abetlen.github.io/llama-cpp-python/whl/cu124\n"
     "ggml_cuda_compute_forward: GET_ROWS failed\nCUDA error: no kernel image is available for execution on the device\n"
     "  current device: 0, in function ggml_cuda_compute_forward at /tmp/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:2413",
     "arch-missing", ["CMAKE_CUDA_ARCHITECTURES", "compute_cap"]),
    # koboldcpp's nocuda build with --usecublas
    ("koboldcpp_nocuda.exe --usecublas normal 0 --gpulayers 35\nWarning: CuBLAS library file not found. Non-BLAS library "
     "will be used.", "torch-build", ["koboldcpp.exe"]),
    # whisper.cpp built without a GPU backend
    ("./build/bin/whisper-cli -m models/ggml-large-v3.bin -f a.wav\nwhisper_backend_init_gpu: device 0: CPU (type: 0)\n"
     "whisper_backend_init_gpu: no GPU found", "torch-build", ["-DGGML_CUDA=1"]),
    # the web UI started with Python 3.13
    ("venv \"C:\\sd\\venv\\Scripts\\Python.exe\"\nINCOMPATIBLE PYTHON VERSION\n\nThis program is tested with 3.10.6 "
     "Python, but you have 3.13.1.", "wheel-platform", ["3.10.6", "venv"]),
    # Forge's check, nothing else in the paste: its own reading
    ("C:\\forge> webui-user.bat\n  File \"C:\\forge\\modules\\launch_utils.py\", line 431, in prepare_environment\n"
     "    raise RuntimeError(\nRuntimeError: Your device does not support the current version of Torch/CUDA! Consider "
     "download another version:", "torch-build", ["whl/cu128", "is_available()"]),
    # the same check on an RTX 5070 with a cu121 torch: the Blackwell rule's reading stands
    ("GeForce RTX 5070, torch 2.3.1+cu121\nRuntimeError: Your device does not support the current version of "
     "Torch/CUDA! Consider download another version:", "arch-missing", ["whl/cu128"]),
    # ComfyUI's comfy-kitchen warning with cu128
    ("pytorch version: 2.8.0+cu128\nWARNING: You need pytorch with cu130 or higher to use optimized CUDA operations.",
     "torch-build", ["whl/cu130"]),
    # DirectML on a Radeon
    ("python main.py --directml\nUsing directml with device: Radeon RX 6650 XT\nRuntimeError: Could not allocate "
     "tensor with 536870912 bytes. There is not enough GPU video memory available!", "out-of-memory", ["--lowvram"]),
    # ComfyUI's cudaMallocAsync out of memory
    ("Device: cuda:0 NVIDIA GeForce RTX 3060 : cudaMallocAsync\n!!! Exception during processing !!! Allocation on "
     "device\ntorch.OutOfMemoryError: Allocation on device", "out-of-memory", ["--lowvram", "Tiled"]),
    # faster-whisper large-v3 in float16 on a 6 GB card
    ("model = WhisperModel('large-v3', device='cuda', compute_type='float16')\n  File \"faster_whisper/transcribe.py\", "
     "line 634, in __init__\nRuntimeError: CUDA failed with error out of memory", "out-of-memory",
     ["compute_type=\"int8_float16\""]),
    # onnxruntime asked for TensorRT first
    ("sess = ort.InferenceSession('model.onnx', providers=['TensorrtExecutionProvider', 'CUDAExecutionProvider'])\n"
     "2025-02-02 11:00:00.1 [W:onnxruntime:Default, onnxruntime_pybind_state.cc:965 CreateExecutionProviderInstance] "
     "Failed to create TensorrtExecutionProvider. Please reference https://onnxruntime.ai/docs/execution-providers/"
     "TensorRT-ExecutionProvider.html#requirements to ensure all dependencies are met.", "rocm-libs-missing",
     ["CUDAExecutionProvider", "tensorrt"]),
    # the driver rule with no CUDA release in the paste names where to read it, not a placeholder
    ("ggml_cuda_init: failed to initialize CUDA: CUDA driver version is insufficient for CUDA runtime version",
     "driver", ["nvidia-smi's \"CUDA Version\""]),
]

NEGATIVES = [
    # Ollama running on the GPU: its start-up lines raise nothing about drivers
    ("level=INFO source=types.go:131 msg=\"inference compute\" id=GPU-1 library=cuda variant=v12 compute=8.6 "
     "driver=12.4 name=\"NVIDIA GeForce RTX 3090\" total=\"23.7 GiB\" available=\"23.3 GiB\"", "OLLAMA_DEBUG=1"),
    # torch's caching-allocator OOM in a training run: not ComfyUI's flags
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
     "of which 1.2 GiB is free.", "--lowvram"),
    # llama.cpp's cudaMalloc OOM is not faster-whisper's compute type
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7052.00 MiB on device 0: cudaMalloc failed: out of memory",
     "compute_type"),
    # ggml on a working GPU: no Vulkan driver advice
    ("ggml_vulkan: Found 1 Vulkan devices:\nggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) | uma: 0 | fp16: 1",
     "mesa-vulkan-drivers"),
    # a torch "no kernel image" (not ggml): torch's wheel, not a llama.cpp rebuild
    ("torch 2.1.0+cu118, NVIDIA GeForce RTX 5090\nRuntimeError: CUDA error: no kernel image is available for execution "
     "on the device", "CMAKE_CUDA_ARCHITECTURES"),
    # onnxruntime's CUDA provider failing is not the TensorRT one
    ("[W:onnxruntime:Default, onnxruntime_pybind_state.cc:965 CreateExecutionProviderInstance] Failed to create "
     "CUDAExecutionProvider. Please reference https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider."
     "html#requirements to ensure all dependencies are met.", "tensorrt-cu12"),
    # a missing ROCm library is not oneAPI's
    ("ImportError: libamdhip64.so.6: cannot open shared object file: No such file or directory", "setvars.sh"),
    # the web UI's own GPU check is not the Python-version reading
    ("RuntimeError: Torch is not able to use GPU; add --skip-torch-cuda-test to COMMANDLINE_ARGS variable to disable "
     "this check", "3.10.6"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
