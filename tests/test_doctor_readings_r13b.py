"""doctor, round 13 (issue 63): readings for missed training cases of libraries not found or of another version, and of
GPU runtimes built for another framework or vendor. Each paste is written for its reading (another GPU, tool, version
or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # TensorFlow 2.3 (built for CUDA 10.1) beside CUDA 11.0, listing no GPU and no load error: the release's CUDA
    ("Ubuntu 20.04, tensorflow-gpu==2.3.1, CUDA/cuDNN version: 11.0 / 8.0\nprint(len(tf.config.list_physical_devices("
     "'GPU')))\nNum GPUs Available: 0", "rocm-libs-missing", ["CUDA 10.1", "cuDNN 7.6", "tensorflow==2.4"]),
    # TensorFlow 1.14 (CUDA 10.0) with CUDA 10.2, the user's words
    ("tensorflow 1.14.0 on windows 10, CUDA version 10.2\nTensorflow doesn't detect my GPU (GTX 1060)",
     "rocm-libs-missing", ["CUDA 10.0", "cuDNN 7.4"]),
    # cuDNN 9.4 from NVIDIA's installer on CUDA 12.4: its DLLs sit in bin\12.6, the CUDA it was built with
    ("Windows 11, RTX 4080\nCUDA 12.4, cuDNN 9.4.0 (exe installer)\nCould not load library cudnn_graph64_9.dll. Error "
     "code 126", "rocm-libs-missing", ["CUDNN\\v9.4\\bin\\12.6", "os.add_dll_directory"]),
    # cuDNN 9.10 shown by its folder, CUDA 12.9
    ("C:\\Program Files\\NVIDIA\\CUDNN\\v9.10\\bin is in my PATH\nCUDA 12.9\nCould not locate cudnn_ops64_9.dll. Please "
     "make sure it is in your library path!", "rocm-libs-missing", ["v9.10\\bin\\12.9"]),
    # cuDNN 8 on Windows: a later part of cuDNN fails with 126 (cuDNN itself loaded): zlibwapi.dll
    ("whisperx on win11, cuDNN 8.6.0 for cuda 11\nCould not load library cudnn_adv_infer64_8.dll. Error code 126\nPlease "
     "make sure cudnn_adv_infer64_8.dll is in your library path!", "rocm-libs-missing", ["zlibwapi.dll"]),
    # zlibwapi.dll named itself
    ("darknet.exe detector test ...\nCUDA-version: 11060, cuDNN: 8.3.2\nCould not locate zlibwapi.dll. Please make sure "
     "it is in your library path!", "rocm-libs-missing", ["zlibwapi.dll", "System32"]),
    # onnxruntime-gpu 1.14 (CUDA 11.6 + cuDNN 8) on Windows with CUDA 11.6 installed: cuDNN 8 is what lacks
    ("pip list: onnxruntime-gpu 1.14.1\nCUDA 11.6, Windows 10\n[E:onnxruntime:Default] EP Error CUDA_PATH is set but CUDA "
     "wasn't able to be loaded. Please install the correct version of CUDA and cuDNN", "rocm-libs-missing",
     ["cuDNN 8", "CUDA 11.6", "zlibwapi"]),
    # onnxruntime-gpu 1.21 on Linux asking for cuDNN 9 and CUDA 12 itself
    ("onnxruntime-gpu==1.21.0, CUDA 12.6 on Debian 12\nFailed to create CUDAExecutionProvider. Require cuDNN 9.* and "
     "CUDA 12.*. Please install all dependencies as mentioned in the GPU requirements page", "rocm-libs-missing",
     ["cuDNN 9", "nvidia-cudnn-cu12==9.*", "LD_LIBRARY_PATH"]),
    # onnxruntime-gpu 1.17 (CUDA 11.8) on a CUDA 12.3 machine: either CUDA 11.8 or the CUDA 12 build
    ("facefusion, onnxruntime-gpu 1.17.0, CUDA 12.3\nCUDA_PATH is set but CUDA wasnt able to be loaded. Please install "
     "the correct version of CUDA and cuDNN", "rocm-libs-missing", ["CUDA 11.8", "onnxruntime-gpu>=1.19"]),
    # no release named: both PyPI generations
    ("[E:onnxruntime:Default, provider_bridge_ort.cc:1992 TryGetProviderInfo_CUDA] LoadLibrary failed with error 126 \"\" "
     "when trying to load \"C:\\venv\\Lib\\site-packages\\onnxruntime\\capi\\onnxruntime_providers_cuda.dll\"",
     "rocm-libs-missing", ["11.8", "cuDNN 9", "pip show onnxruntime-gpu"]),
    # sherpa-onnx's +cuda wheel (a bundled CUDA 11.8 onnxruntime) on a CUDA 12 machine, by its import name
    ("import sherpa_onnx  # 1.10.40+cuda, CUDA 12.2 toolkit\nOSError: libcudart.so.11.0: cannot open shared object file: "
     "No such file or directory", "rocm-libs-missing", ["11.8", "cuda12.cudnn9"]),
    # onnxruntime's CUDA provider on an Intel Arc card
    ("GPU: Intel Arc A770 16GB, Windows 11\nonnxruntime::CudaCall CUDA failure 100: no CUDA-capable device is "
     "detected ; GPU=0 ; expr=cudaSetDevice(info_.device_id);", "torch-build", ["onnxruntime-openvino"]),
    # on a Radeon under Linux: the ROCm / MIGraphX build
    ("Radeon RX 7900 XTX, Ubuntu 24.04\n2025-01-02 [E:onnxruntime:Default] onnxruntime::CudaCall CUDA failure 35: CUDA "
     "driver version is insufficient for CUDA runtime version", "torch-build", ["onnxruntime-migraphx"]),
    # the CPU onnxruntime listing its providers beside an NVIDIA card (torch sees it)
    ("torch.cuda.is_available(): True, GPU NVIDIA GeForce RTX 3090\nonnxruntime.get_available_providers() -> "
     "['CPUExecutionProvider']\nWARNING: CUDAExecutionProvider not available, falling back to CPU", "torch-build",
     ["onnxruntime-gpu"]),
    # a Python program on the CPU with the user's CUDA in a template line: torch's CUDA build
    ("- OS: Windows 10\n- python: 3.11\n- cuda: 11.8\nTranscribing doesn't use GPU, it runs only CPU",
     "torch-build", ["download.pytorch.org/whl/cu"]),
    # A1111 on a Windows AMD card (webui-user.bat): its AMD fork's DirectML flag
    ("Radeon RX 6600 8GB\nlaunching webui-user.bat\nRuntimeError: Torch is not able to use GPU; add "
     "--skip-torch-cuda-test to COMMANDLINE_ARGS variable to disable this check", "torch-build",
     ["--use-directml", "stable-diffusion-webui-amdgpu"]),
    # ComfyUI on a Windows AMD card: torch-directml and --directml
    ("ComfyUI on Windows 10 with an RX 580\nAssertionError: Torch not compiled with CUDA enabled", "torch-build",
     ["torch-directml", "--directml"]),
]

NEGATIVES = [
    # TensorFlow 2.10 on the CUDA it was built for, GPU not listed: not another CUDA
    ("TensorFlow version: 2.10.0\nCUDA version: 11.2\nGPU not found, tf.config.list_physical_devices('GPU') returns []",
     "install CUDA 11.2"),
    # a cuDNN 9 DLL missing where no cuDNN is said to be installed: not the installer's folder
    ("Could not locate cudnn_ops64_9.dll. Please make sure it is in your library path!\nRTX 4070, Windows 11",
     "CUDNN\\v9"),
    # cuDNN 8's first part missing, nothing said installed: not zlib
    ("Could not load library cudnn_ops_infer64_8.dll. Error code 126\nPlease make sure cudnn_ops_infer64_8.dll is in "
     "your library path!", "zlibwapi"),
    # cuDNN 8.2 (before the zlib dependency)
    ("cuDNN 8.2.1 installed\nCould not load library cudnn_cnn_infer64_8.dll. Error code 126", "zlibwapi"),
    # the provider naming a versioned CUDA library: that library's reading, not the release table's
    ("onnxruntime-gpu 1.18.0\nFailed to create CUDAExecutionProvider\nlibcublasLt.so.11: cannot open shared object file",
     "1.15 to 1.18"),
    # sherpa-onnx missing a CUDA 12 library: not the CUDA 11.8 bundle
    ("sherpa-onnx 1.12.13+cuda12.cudnn9\nOSError: libcublasLt.so.12: cannot open shared object file", "CUDA 11.8's"),
    # an Intel iGPU beside an RTX card: the NVIDIA driver's error stays the driver's
    ("Laptop: Intel Iris Xe + NVIDIA GeForce RTX 3060\nonnxruntime::CudaCall CUDA failure 35: CUDA driver version is "
     "insufficient for CUDA runtime version", "openvino"),
    # A1111 on Linux with an AMD card: the ROCm torch, not DirectML
    ("RX 6800 on Ubuntu 22.04, ./webui.sh\nRuntimeError: Torch is not able to use GPU; add --skip-torch-cuda-test to "
     "COMMANDLINE_ARGS variable to disable this check", "--use-directml"),
    # a template's CUDA line with no complaint of the CPU
    ("- OS: Windows 11\n- cuda: 12.1\nHow do I change the output folder?", "download.pytorch.org/whl/cu"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
