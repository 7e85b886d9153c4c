"""doctor, round 17 (r17a): readings for missed training cases of TheRock wheels without the GPU's family and APUs
faulting on a stand-in override, a ROCr nightly regression, MIOpen's Winograd solver on gfx1150, librocdxg older
than ROCm, an amdsmi package of another ROCm, AMD GPUs without peer access, jaxlib's local-CUDA wheels without cuDNN,
TensorFlow's [and-cuda] wheels under WSL, generic arm64 builds on a Jetson, Vulkan in a slim image and Vulkan's
development files, the Visual C++ runtime, ggml builds without a GPU backend, koboldcpp's other prebuilt, ctranslate2
borrowing torch's cuBLAS DLLs, and ROCm's compiler without C++ headers. Each paste is written for its reading
(another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each reading out of
pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # TheRock's targets listing without an RDNA4 card: the gfx120X-all index
    ("pip install rocm[libraries] torch from the gfx110X-all index\n$ rocm-sdk targets\ngfx1100;gfx1101;gfx1102;gfx1103\n"
     "GPU: Radeon RX 9070 XT (gfx1201)\nRuntimeError: HIP error: invalid device function", "arch-missing",
     ["rocm.nightlies.amd.com/v2/gfx120X-all"]),
    # a smaller Strix Halo spoofed as gfx1102 under Arch's own ROCm, the run hanging
    ("Ryzen AI Max 385 with Radeon 8050S, Arch Linux, rocm-hip-runtime 6.2.4 from the repos\n"
     "HSA_OVERRIDE_GFX_VERSION=11.0.2 python infer.py\nthe first forward pass hangs and then: HW Exception by GPU node-1 "
     "reason: GPU Hang", "arch-missing", ["unset HSA_OVERRIDE_GFX_VERSION", "v2/gfx1151"]),
    # the InitDma crash from another tool (a HIP sample) on a Radeon 890M, a later nightly in the range
    ("hipInfo crashes right away with TheRock 7.14.0a20260611 on my Radeon 890M (gfx1150)\nProgram received signal "
     "SIGSEGV\n#1 0x00007f1 in rocr::AMD::GpuAgent::InitDma() () from /opt/therock/lib/libhsa-runtime64.so.1",
     "driver", ["PR 7053", "7.14.0a20260608"]),
    # MIOpen's Winograd Fury kernels chosen on a gfx1150, said in a MIOpen log
    ("MIOpen(HIP): Error [Compile] 'ConvWinoFuryRxS<2-3>' failed to launch on gfx1150\nRadeon 880M, ROCm 7.11 nightly",
     "miopen-kernel", ["4023", "MIOPEN_DEBUG_AMD_WINOGRAD_FURY_RXS_F2X3=0"]),
    # librocdxg missing another new thunk entry point
    ("WSL2 Ubuntu 22.04, librocdxg 1.1.0 and ROCm 7.12 from TheRock\n$ python -c 'import torch'\ndlsym failed: "
     "/usr/lib/librocdxg.so: undefined symbol: hsaKmtHandleExport", "wsl", ["7.12", "librocdxg"]),
    # amdsmi of ROCm 6.4.1 under a 6.4.3 CLI, in a user site
    ("$ /opt/rocm-6.4.3/bin/amd-smi static\n  File \"/home/ana/.local/lib/python3.12/site-packages/amdsmi/"
     "amdsmi_wrapper.py\", line 1800\nAttributeError: /opt/rocm-6.4.1/lib/libamd_smi.so.25: undefined symbol: "
     "amdsmi_get_gpu_xgmi_link_status", "abi-mismatch", ["pip uninstall amdsmi", "/opt/rocm-6.4.3/share/amd_smi"]),
    # two Instinct cards without peer access in the older "Device Access" matrix
    ("RocmBandwidthTest Version: 2.5.0\n  Device: 0,  Intel(R) Xeon(R) Gold 6338\n  Device: 1,  AMD Instinct MI100,  "
     "GPU-aa,  21:0.0\n  Device: 2,  AMD Instinct MI100,  GPU-bb,  81:0.0\n  Device Access\n  D/D  0  1  2\n  0  1  1  1\n"
     "  1  1  1  0\n  2  1  0  1", "driver", ["amdgpu-dkms", "HSA_AMD_P2P"]),
    # jaxlib's CUDA 12 local wheel with cuDNN missing, said through cuDNN's loader
    ("pip install jax[cuda12_local]\njaxlib 0.4.20+cuda12.cudnn89\nCUDA 12.2 toolkit, cudnn 8.9\nCould not load library "
     "libcudnn_ops_infer.so.8. Error: libcudnn_ops_infer.so.8: cannot open shared object file", "rocm-libs-missing",
     ["libcudnn8=8.9", "+cuda12.2"]),
    # TensorFlow's and-cuda wheels under WSL 2 on Windows 10, an empty GPU list
    ("Windows 10 with WSL2 (Ubuntu 22.04)\npip install tensorflow[and-cuda]==2.17.0\n>>> tf.config."
     "list_physical_devices('GPU')\n[]", "rocm-libs-missing", ["LD_LIBRARY_PATH"]),
    # llama.cpp's prebuilt arm64 release on a Xavier
    ("Jetson AGX Xavier, JetPack 5.1\nran the llama.cpp arm64 release binary llama-server\nCUDA error: no kernel image "
     "is available for execution on the device", "wheel-platform", ["from source", "JetPack"]),
    # whisper.cpp's Vulkan build in a podman container image
    ("podman run --device /dev/dri localhost/whisper-vulkan\nggml_vulkan: No devices found.\nwhisper_init: using CPU",
     "rocm-libs-missing", ["libglvnd0", "libegl1"]),
    # CMake's own wording on Ubuntu for stable-diffusion.cpp
    ("Ubuntu 24.04\ncmake .. -DSD_VULKAN=ON\nCMake Error at /usr/share/cmake-3.28/Modules/FindPackageHandleStandardArgs."
     "cmake:230 (message):\n  Could NOT find Vulkan (missing: Vulkan_LIBRARY Vulkan_INCLUDE_DIR glslc)",
     "rocm-libs-missing", ["libvulkan-dev", "glslc"]),
    # LM-style Windows app without the VC++ runtime (a program with no table row)
    ("Windows 11\nThe code execution cannot proceed because MSVCP140.dll was not found. Reinstalling the program may fix "
     "this problem.\nkoboldcpp_rocm.exe", "rocm-libs-missing", ["vc_redist.x64.exe"]),
    # ollama's runner exiting with STATUS_DLL_NOT_FOUND, in Chinese, an old release
    ("ollama version is 0.3.6\nWindows 10\nError: llama runner process has terminated: exit status 0xc0000135",
     "rocm-libs-missing", ["0.3.12", "vc_redist"]),
    # llama.cpp built with cmake but no backend, on an AMD card
    ("cmake -B build -DLLAMA_CURL=ON -DCMAKE_BUILD_TYPE=Release\nRadeon RX 7800 XT (gfx1101), ROCm 6.3\nllama.cpp only "
     "uses the CPU, not my GPU", "torch-build", ["-DGGML_HIP=ON", "AMDGPU_TARGETS=gfx1101"]),
    # koboldcpp's Linux binary on a Maxwell card
    ("./koboldcpp-linux-x64 --usecublas\nWelcome to KoboldCpp - Version 1.90\nERROR: CUDA kernel mul_mat_q has no device "
     "code compatible with CUDA arch 520. ggml-cuda.cu was compiled for: 600,610,700", "arch-missing", ["cu12"]),
    # ctranslate2 on Windows with a CUDA 12 torch beside it
    ("WhisperX on Windows 11, torch 2.3.1+cu121\nRuntimeError: Library cublas64_12.dll is not found or cannot be loaded",
     "rocm-libs-missing", ["import torch before ctranslate2"]),
    # hipcc's own header error from a ROCm build on Ubuntu 24.04
    ("Ubuntu 24.04, ROCm 6.4.1\n/opt/rocm-6.4.1/lib/llvm/lib/clang/19/include/cuda_wrappers/cmath:27:15: fatal error: "
     "'cmath' file not found", "rocm-libs-missing", ["libstdc++-14-dev"]),
    # a ROCm torch aborting at its first convolution on Debian, with the xformers warning beside it
    ("Debian 12, Radeon RX 6950 XT, torch 2.1.2+rocm5.6\nWARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers "
     "was built for:\n    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+rocm5.6)\nAborted (core dumped) python "
     "launch.py", "rocm-libs-missing", ["libstdc++-12-dev"]),
]

NEGATIVES = [
    # the GPU is in the rocm-sdk targets list: not the other-family reading
    ("$ rocm-sdk targets\ngfx1100;gfx1101;gfx1102\nRX 7900 XTX (gfx1100)\nRuntimeError: HIP error: invalid device function",
     "the TheRock wheels installed carry no"),
    # a discrete card with an override and a fault: not the APU reading
    ("RX 6600 (gfx1032)\nexport HSA_OVERRIDE_GFX_VERSION=10.3.0\nMemory access fault by GPU node-1", "v2/gfx103X-dgpu"),
    # the InitDma frame in a nightly from before the regression: no roll-back advice
    ("rocm 7.14.0a20260601 on gfx1151\nsegfault in rocr::AMD::GpuAgent::InitDma()", "PR 7053"),
    # MIOpen's Winograd solver failing on a card the table does not list: not the gfx1150 pull request
    ("MIOpen(HIP): Error ConvBinWinogradRxSf2x3g1 failed to launch\nRX 7900 XTX (gfx1100)", "4023"),
    # librocdxg not found at all: not the older-bridge reading
    ("WSL2\nlibrocdxg.so: cannot open shared object file: No such file or directory", "librocdxg release built for"),
    # an undefined symbol in another ROCm library: not the amdsmi reading
    ("ImportError: /opt/rocm-7.0.1/lib/libMIOpen.so.1: undefined symbol: _ZN2ck16tensor_operation", "pip uninstall amdsmi"),
    # every GPU pair has access: no peer reading
    ("Device: 0,  AMD EPYC 7543\nDevice: 1,  AMD Instinct MI210,  GPU-aa\nDevice: 2,  AMD Instinct MI210,  GPU-bb\n"
     "Inter-Device Access\nD/D 0 1 2\n0 1 1 1\n1 1 1 1\n2 1 1 1", "HSA_AMD_P2P"),
    # jax's pip-CUDA wheels: not the local-CUDA reading
    ("pip install jax[cuda12]\nCould not load library libcudnn.so.9", "libcudnn8="),
    # a Jetson case built from source: not the generic-arm64 reading
    ("Jetson Orin Nano, built llama.cpp from source with cmake -B build -DGGML_CUDA=ON\nCUDA error: out of memory",
     "generic arm64"),
    # ggml_vulkan without devices on a desktop: not the container reading
    ("Fedora 40, RX 580\nggml_vulkan: No devices found.", "libglvnd0"),
    # a run without /dev/dri: the device reading, not the libraries
    ("docker run -it ghcr.io/ggml-org/llama.cpp:server-vulkan\nggml_vulkan: No devices found.", "libglvnd0"),
    # Vulkan found by CMake: not the headers reading
    ("cmake -B build -DGGML_VULKAN=ON\n-- Found Vulkan: /usr/lib/libvulkan.so\nerror: glslc: command not found",
     "vulkan-devel"),
    # a newer ollama with the DLL status: no ollama upgrade to 0.3.12
    ("ollama version is 0.5.7\nWindows 11\nexit status 0xc0000135", "update Ollama to 0.3.12"),
    # a whisper.cpp CUDA build that finds no GPU: not the no-backend reading
    ("cmake -B build -DGGML_CUDA=1\nwhisper.cpp: no GPU found", "configure again with the GPU backend"),
    # koboldcpp's CUDA 12 build already failing: not "use the cu12 build"
    ("tried koboldcpp_cu12.exe too, same crash\nWelcome to KoboldCpp\nERROR: CUDA kernel has no device code compatible "
     "with CUDA arch 520.", "use koboldcpp's CUDA 12 build"),
    # an abort on an NVIDIA torch: not the ROCm headers reading
    ("Ubuntu 22.04, RTX 3090, torch 2.2.0+cu121\nAborted (core dumped)", "libstdc++-12-dev"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
