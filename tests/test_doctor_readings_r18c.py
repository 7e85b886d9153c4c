"""doctor, round 18 (r18c): readings for missed training cases of torch builds and wheels for another platform: torch
taken from pytorch.org's CPU index, openai-whisper's CPU warning and torch programs said to stay off the GPU (the
CUDA index from the paste's own facts: a pinned release, the user's CUDA, nvidia-smi's CUDA UMD Version), an NVIDIA
card beside a Ryzen APU, onnxruntime built without --use_cuda, a cargo build without its GPU feature, llama.cpp
under a Python program (llama-cpp-python), an execution-provider list without CUDA (the program's installer), a
Jetson wheel of another JetPack, pacman's stale database, conda's missing __cuda, and an installer's fallback index.
Each paste is written for its reading (another GPU, tool, version or wording than the mined case that asked for
it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # whisper's CPU warning from the command line tool, a laptop RTX named
    ("whisper interview.mp3 --model medium --language en\n/home/li/.venv/lib/python3.11/site-packages/whisper/"
     "transcribe.py:115: UserWarning: FP16 is not supported on CPU; using FP32 instead\nlaptop with an RTX 4070, it "
     "takes forever", "torch-build", ["download.pytorch.org/whl/cu", "--upgrade"]),
    # openai-whisper said to run on the CPU on Windows, no GPU named: the index for Maxwell to Ada
    ("Windows 10, installed openai-whisper with pip in a venv\nwhisper never uses the GPU, transcription runs on the "
     "CPU only", "torch-build", ["whl/cu126", "pip uninstall torch"]),
    # YOLO trained from a torch pinned on the CPU index: the same pins from that release's newest CUDA index
    ("pip install torch==2.4.1 torchvision==0.19.1 --index-url https://download.pytorch.org/whl/cpu\nyolo train "
     "data=coco8.yaml model=yolov8n.pt device=0 runs on the cpu instead of the gpu", "torch-build",
     ["torch==2.4.1", "whl/cu124"]),
    # a voice-conversion UI that cannot load the GPU, the user naming torch's release and CUDA 12.1
    ("so-vits-svc webui\ntorch version: 2.1.2\nCUDA 12.1 installed, GeForce RTX 2060\ncan't load the GPU, everything "
     "is slow", "torch-build", ["whl/cu121", "--upgrade"]),
    # an NVIDIA card in a Ryzen laptop: the CUDA torch, for the CUDA the user names
    ("Windows 11\nGeForce RTX 4060 Laptop GPU\nAMD Ryzen 7 7735HS\nCUDA 12.4\nAssertionError: Torch not compiled with "
     "CUDA enabled", "torch-build", ["whl/cu124"]),
    # onnxruntime built with build.bat and only the TensorRT home given: the switch
    ("built onnxruntime 1.20 myself: .\\build.bat --config Release --build_wheel --tensorrt_home C:\\TensorRT-10\n"
     "UserWarning: Specified provider 'TensorrtExecutionProvider' is not in available provider names.Available "
     "providers: 'CPUExecutionProvider'", "torch-build", ["--use_tensorrt", "build.bat"]),
    # a cargo-built server asked for rocm
    ("$ ./target/release/llm-server serve --device rocm\nerror: invalid value 'rocm' for '--device <DEVICE>'\n  "
     "[possible values: cpu, metal]", "torch-build", ["--features rocm"]),
    # llama.cpp's BLAS = 0 from a Python app's log
    ("python app.py --model mistral-7b.Q4_K_M.gguf --n_gpu_layers 35\nAVX = 1 | AVX2 = 1 | FMA = 1 | BLAS = 0 | "
     "SSE3 = 1\nGPU not used at all", "torch-build", ["llama-cpp-python", "CMAKE_ARGS"]),
    # an execution-provider list without CUDA after an update, program unnamed
    ("after updating I cannot see CUDA in the execution providers list any more, only CPU\nRTX 3090, Windows 11",
     "torch-build", ["uninstall onnxruntime", "install.py"]),
    # a Jetson TX2 with a wheel made for CUDA 10.2 on JetPack 5
    ("Jetson AGX Xavier\n>>> import torch\nOSError: libcudart.so.10.2: cannot open shared object file: No such file or "
     "directory", "wheel-platform", ["JetPack 5", "11.4"]),
    # pacman on Manjaro failing to fetch a file from a stale database
    ("$ sudo pacman -S rocm-hip-sdk\nerror: failed retrieving file 'rocblas-6.0.2-1-x86_64.pkg.tar.zst' from "
     "mirror.example.org : The requested URL returned error: 404", "wheel-platform", ["pacman -Syu"]),
    # conda-forge's jax CUDA build solved inside a docker build
    ("RUN conda install -c conda-forge \"jaxlib=*=*cuda*\" jax cuda-version=12\nCould not solve for environment specs\n"
     "  jaxlib =* *cuda* is not installable because it requires\n    __cuda =* *, which is missing on the system.",
     "wheel-platform", ["CONDA_OVERRIDE_CUDA=12.0"]),
    # an installer that fell back to cu118 on a CUDA 12.8 driver with an RTX 5080
    ("NVIDIA-SMI 572.16   Driver Version: 572.16   CUDA Version: 12.8\nGPU: NVIDIA GeForce RTX 5080\n[setup] could not "
     "detect CUDA version, falling back to cu118", "wheel-platform", ["whl/cu128"]),
]

NEGATIVES = [
    # torch from the CPU index on purpose, on a machine with no complaint: no reading of the build
    ("pip install torch --index-url https://download.pytorch.org/whl/cpu\nSuccessfully installed torch-2.5.1+cpu",
     "torch was installed from pytorch.org's CPU index"),
    # faster-whisper (CTranslate2) on the CPU: no torch index for it
    ("faster-whisper runs on the CPU only, RTX 3070, Windows 11", "--upgrade torch torchvision torchaudio"),
    # an AMD card with a Ryzen CPU: still AMD, no CUDA index
    ("Ubuntu 24.04\nRadeon RX 7800 XT\nAMD Ryzen 7 7700X\nRuntimeError: Found no NVIDIA driver on your system",
     "whl/cu1"),
    # onnxruntime-gpu from PyPI, no source build: no build switch
    ("pip install onnxruntime-gpu==1.18.0\nUserWarning: Specified provider 'CUDAExecutionProvider' is not in available "
     "provider names.Available providers: 'CPUExecutionProvider'", "--use_cuda"),
    # a cargo program refusing a value it does not know, with cuda among the possible values
    ("$ ./target/release/tool --device gpu\nerror: invalid value 'gpu' for '--device <DEVICE>'\n  [possible values: "
     "cpu, cuda]", "--features"),
    # a real pacman conflict with nothing stale about it
    ("$ sudo pacman -S opencl-amd\n:: opencl-amd and rocm-opencl-runtime are in conflict. Remove rocm-opencl-runtime? "
     "[y/N] n\nerror: unresolvable package conflicts detected", "pacman -Syu"),
    # libcudart 10.0 missing on an x86 desktop: not a JetPack reading
    ("Ubuntu 18.04, GTX 1080\nImportError: libcudart.so.10.0: cannot open shared object file: No such file or "
     "directory", "JetPack"),
    # an installer that read the CUDA version fine
    ("NVIDIA-SMI 550.54   Driver Version: 550.54   CUDA Version: 12.4\ninstalling PyTorch "
     "(https://download.pytorch.org/whl/cu124)...", "fell back"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
