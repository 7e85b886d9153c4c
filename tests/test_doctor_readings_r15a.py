"""doctor, round 15 (issue 63): readings for batch 13/14's missed training cases of torch extensions built for another
torch or CUDA (spconv / cumm, a self-built extension, libstdc++ symbols, a toolkit's library off the loader's path),
apps' own environments and drivers (a desktop app's greyed GPU option, the async allocator a driver lacks, a CPU torch
pulled by a pinned program, onnxruntime programs left on the CPU) and Blackwell attention kernels. Each paste is written
for its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # Rust's cudarc (candle) not finding the driver library under WSL, its newer wording: WSL's own lib folder
    ("running candle's whisper example inside WSL2 Ubuntu 22.04\nthread 'main' panicked at cudarc-0.12.1/src/driver/"
     "sys/mod.rs: Unable to dynamically load the \"cuda\" shared library - searched for library names: [\"cuda\", "
     "\"nvcuda\"]", "wsl", ["LD_LIBRARY_PATH=/usr/lib/wsl/lib"]),
    # the runtime refusing a call the driver lacks, ComfyUI named: its own allocator switch
    ("ComfyUI on a GTX 1070, torch 2.1.2+cu121\n  File \"comfy/model_management.py\", line 98\nRuntimeError: CUDA "
     "error: API call is not supported in the installed CUDA driver", "driver",
     ["--disable-cuda-malloc", "530 branch"]),
    # the same, no app named: the variable and the driver
    ("torch 2.3.0+cu118 on Windows 10, GTX 970\nRuntimeError: CUDA error: API call is not supported in the installed "
     "CUDA driver\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", "driver",
     ["PYTORCH_CUDA_ALLOC_CONF", "cudaMallocAsync", "520 branch"]),
    # UVR's GPU option greyed out on another NVIDIA card, UVR named: the driver
    ("Ultimate Vocal Remover 5.6 - GPU Conversion is greyed out, my laptop has a GeForce GTX 1650", "driver",
     ["NVIDIA graphics driver", "GTX 1650"]),
    # the same option on a Radeon: UVR's other build
    ("UVR5: the GPU Conversion checkbox is disabled. GPU is an AMD Radeon RX 6700 XT", "torch-build", ["OpenCL"]),
    # a self-built extension under a Maxwell card, the build said in words (another extension, card, torch)
    ("compiled the correlation package against torch 1.10 with CUDA 11.3 on a GTX 980\nRuntimeError: CUDA error: no "
     "kernel image is available for execution on the device", "arch-missing", ["TORCH_CUDA_ARCH_LIST", "5.2"]),
    # a bare "TITAN X" is the Maxwell card
    ("mish_cuda built from source, TITAN X, torch 1.8\nRuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "arch-missing", ["TORCH_CUDA_ARCH_LIST=\"5.2\""]),
    # a libstdc++ symbol undefined (std::thread's newer entry point) in a conda env: the C++ runtime
    ("conda env, torch 1.13\nImportError: /home/ana/miniconda3/envs/geo/lib/python3.9/site-packages/torch_cluster/"
     "_grid_cuda.so: undefined symbol: _ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_"
     "deleteIS1_EEPFvvE",
     "abi-mismatch", ["conda install libgcc", "libstdcxx-ng"]),
    # a CUDA 10.1 library missing while the 10.1 toolkit is installed (nvcc says so): its lib64 onto the loader's path
    ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 10.1, V10.1.243\nImportError: "
     "libcudart.so.10.1: cannot open shared object file: No such file or directory", "rocm-libs-missing",
     ["/usr/local/cuda/lib64"]),
    # cumm's CPU build under spconv, torch's CUDA shown: the pair for it
    ("torch 1.12.1+cu116\n  File \"/opt/venv/lib/python3.9/site-packages/spconv/pytorch/conv.py\", line 441\n"
     "ValueError: /io/include/tensorview/tensor.h(171)\ndon't compiled with cuda", "torch-build",
     ["spconv-cu116 cumm-cu116"]),
    # spconv's zero-block launch on a Tesla K80: the Kepler build
    ("Tesla K80, spconv-cu113\nRuntimeError: /io/include/tensorview/cuda/launch.h(53)\nN > 0 assert faild. CUDA kernel "
     "launch blocks must be positive, but got N= 0", "arch-missing", ["spconv-cu102"]),
    # a pinned program's CPU torch said in words, CUDA 12.4 (audiocraft's torch 2.1.0): a cu12x label that has 2.1
    ("pip install audiocraft pulled a CPU-only torch on Windows 11, RTX 3060, CUDA 12.4", "torch-build",
     ["torch==2.1.0", "whl/cu121"]),
    # insightface said to stay on the CPU: onnxruntime-gpu, alone
    ("insightface FaceAnalysis is not using the GPU at all, it runs only on the CPU (RTX 3090, Ubuntu)", "torch-build",
     ["pip uninstall onnxruntime onnxruntime-gpu", "onnxruntime-gpu"]),
    # a Blackwell card under a cu128 torch, the HunyuanVideo wrapper: its attention mode
    ("RTX 5080, torch 2.7.1+cu128\nHyVideoSampler\nCUDA error: no kernel image is available for execution on the "
     "device",
     "attention", ["sdpa", "sageattn_varlen"]),
]

NEGATIVES = [
    # libcuda not found outside WSL: not WSL's folder
    ("thread 'main' panicked: Unable to find cuda lib under the names [\"cuda\", \"nvcuda\"]. Please open GitHub "
     "issue.\n"
     "Ubuntu 22.04 server, driver not installed yet", "/usr/lib/wsl/lib"),
    # "insufficient driver" is another reading: not the async allocator
    ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version\ntorch 2.1.0+cu121",
     "cudaMallocAsync"),
    # a GPU option greyed out in an app not in the table: no driver reading from the table
    ("the GPU checkbox is greyed out in Audacity's noise reduction, GTX 1060", "GPU Conversion"),
    # a wheel built for torch (not the user's build): not a rebuild with the arch list
    ("installed the wheel built for torch 2.1 from the index, RTX 4090\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "TORCH_CUDA_ARCH_LIST"),
    # the C++11 string ABI's std::__cxx11 symbol is torch's ABI reading, not the C++ runtime's
    ("torch 2.5.1\nImportError: /venv/lib/python3.10/site-packages/foo_ext.so: undefined symbol: _ZNSt7__cxx1112basic_"
     "stringIcSt11char_traitsIcESaIcEE6appendEPKc", "conda install libgcc"),
    # a library of another CUDA than the toolkit said: not the toolkit's lib64
    ("nvcc: Cuda compilation tools, release 11.8, V11.8.89\nImportError: libcudart.so.10.1: cannot open shared object "
     "file: No such file or directory", "/usr/local/cuda/lib64:$LD_LIBRARY_PATH"),
    # a CUDA torch shown running: not "the CPU build"
    ("torch 2.6.0+cu126 installed, but chatterbox says torch installed without gpu support?", "pip uninstall -y torch"),
    # rembg on an AMD card: not onnxruntime-gpu
    ("rembg is not using the GPU, only the CPU. AMD Radeon RX 7900 XTX on Windows", "pip install onnxruntime-gpu"),
    # no kernel image on Blackwell with an old torch: torch's build, not the attention mode
    ("RTX 5090, torch 2.5.1+cu124\nWanVideoSampler\nCUDA error: no kernel image is available for execution on the "
     "device", "attention_mode"),
    # tensorview's errors outside spconv's pair (a CUDA build shown working): not the CPU cumm
    ("spconv-cu118 works, tensorview prints tensor.h(171) shape mismatch", "pip uninstall -y spconv cumm"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
