"""doctor, round 12 (issue 63): readings for batch 11's missed torch-build and wheel-platform training cases. Each paste
is written for its reading (another GPU, tool, version or wording than the mined case that asked for it); the
negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the web UI's own start-up check quoted in prose, on an AMD card under Linux (another card and wording): the ROCm
    # torch from pytorch.org's ROCm index
    ("Fedora 40, Radeon RX 7600. After installing stable-diffusion-webui the launcher stops with \"Torch is not able "
     "to use GPU; add --skip-torch-cuda-test to COMMANDLINE_ARGS\"", "torch-build",
     ["download.pytorch.org/whl/rocm", "pip uninstall torch"]),
    # PyTorch Lightning's start-up line beside a conda list whose pytorch build string is the CPU variant
    ("trainer = pl.Trainer(accelerator='gpu', devices=2)\nGPU available: False, used: False\n"
     "# Name                    Version                   Build  Channel\n"
     "pytorch                   1.10.2              py3.9_cpu_0    pytorch", "torch-build",
     ["download.pytorch.org/whl/cu"]),
    # Lightning's older refusal with the _pytorch_select metapackage (another Python, another request)
    ("    raise MisconfigurationException(message)\nMisconfigurationException:\n    You requested GPUs: [0, 1]\n"
     "    But your machine only has: []\n_pytorch_select           0.2                       cpu_0", "torch-build",
     ["download.pytorch.org/whl/cu"]),
    # a program's own log line naming its device as the CPU, with an NVIDIA card named (another program and card)
    ("Fresh install of the app on Windows 11 with an RTX 3070\n[init] Using device: cpu\nLoading model...",
     "torch-build", ["download.pytorch.org/whl/cu"]),
    # a UI that shows CPU where the GPU's name should be, after a manual install, no GPU named
    ("I installed the voice cloning tool manually with pip install -r requirements.txt; the GPU info box just shows "
     "0 CPU, can it not train on my graphics card?", "torch-build", ["download.pytorch.org/whl/cu"]),
    # a 32-bit Python's banner under a pip install of another package, the name cut off
    ("Python 3.9.13 (tags/v3.9.13:6de2ca5, May 17 2022, 16:36:42) [MSC v.1929 32 bit (Intel)] on win32\n"
     "> pip install onnxruntime-gpu\nERROR: Could not find a version that satisfies the requirement\n"
     "ERROR: No matching distribution found", "wheel-platform", ["64-bit"]),
    # a 32-bit Python by its folder, under a launcher's own failure
    ("venv \"D:\\ai\\venv\\Scripts\\Python.exe\" created from C:\\Python311-32\\python.exe\nInstalling torch\n"
     "Couldn't install torch.", "wheel-platform", ["64-bit", "struct.calcsize"]),
    # torch 1.13's pin on Windows with Python 3.11 (another CUDA label): 1.13 had 3.11 wheels for Linux only
    ("Python 3.11.4 (tags/v3.11.4:d2340ef, Jun  7 2023, 05:45:37) [MSC v.1934 64 bit (AMD64)] on win32\n"
     "ERROR: Could not find a version that satisfies the requirement torch==1.13.0+cu116 (from versions: 2.0.0+cu118, "
     "2.0.1+cu118)\nERROR: No matching distribution found for torch==1.13.0+cu116", "wheel-platform",
     ["python=3.10"]),
    # both twins said in words (paddle, another wording)
    ("paddlepaddle-gpu and paddlepaddle are both installed in my env; paddle.device.get_device() returns cpu and "
     "is_compiled_with_cuda() -> False", "wheel-platform", ["uninstall paddlepaddle"]),
    # onnxruntime's twins said in words, with DirectML (another GPU build)
    ("I have installed both onnxruntime and onnxruntime-directml on Windows 11, but only CPUExecutionProvider is "
     "listed by get_available_providers()", "wheel-platform", ["uninstall onnxruntime", "onnxruntime-directml"]),
    # flash-attn's newer wheel on Debian 11 (glibc 2.31, the required-by form): its last release built for it
    ("Debian 11 server\nImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by "
     "/opt/venv/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so)", "wheel-platform",
     ["2.7.4.post1", "Debian 12"]),
    # TensorFlow 2.13 on Windows with the GPU list empty said in words (another version and card)
    ("Windows 11, RTX 4060, TensorFlow 2.13.0 installed with pip\nprint(tf.config.list_physical_devices('GPU'))\n"
     "GPU not found", "wheel-platform", ["WSL2", "2.10"]),
    # the Windows GPU C library of a later release not on the bucket
    ("downloading libtensorflow-gpu-windows-x86_64-2.12.0.zip for my C++ app on Windows gives 404 Not Found",
     "wheel-platform", ["2.10"]),
    # a serving engine said to be run on Windows, without a pip line (another engine)
    ("Can sglang run on windows? I tried sglang with Windows 11 and it fails to import its CUDA kernels",
     "wheel-platform", ["WSL"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # a 64-bit Python whose pip finds no wheel: not the 32-bit reading
    ("Python 3.13.0 [MSC v.1941 64 bit (AMD64)] on win32\nERROR: Could not find a version that satisfies the "
     "requirement torch==2.2.0 (from versions: 2.5.0, 2.5.1)", "64-bit Python (the x86-64"),
    # a 32-bit Python that installs fine: no install failure, no reading
    ("Python 3.8.10 [MSC v.1928 32 bit (Intel)] on win32\nSuccessfully installed numpy-1.24.4", "64-bit"),
    # torch 1.13 on Linux with Python 3.11 had wheels: not "up to 3.10"
    ("Python 3.12.1 on Ubuntu 22.04\nERROR: Could not find a version that satisfies the requirement torch==1.13.1 "
     "(from versions: 2.2.0, 2.2.1)", "python=3.10"),
    # only the GPU twin named with a version: no "both installed" reading
    ("pip list\nonnxruntime-gpu 1.17.1\nonly CPUExecutionProvider is available", "uninstall onnxruntime (the CPU"),
    # the words "both" about other packages
    ("I installed both torch and onnxruntime-gpu, only CPUExecutionProvider shows", "uninstall onnxruntime (the CPU"),
    # a glibc too new for the OS for another package: no flash-attn release named
    ("Ubuntu 20.04\nImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by "
     "/usr/local/lib/python3.10/site-packages/somepkg/_core.so)", "2.7.4.post1"),
    # flash-attn's glibc ask on an OS older than its last good release's (Ubuntu 18.04, glibc 2.27): not that release
    ("Ubuntu 18.04\nImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by "
     "/venv/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so)", "2.7.4.post1"),
    # TensorFlow under WSL: the Linux build, not the native-Windows reading
    ("Windows 11 with WSL2 Ubuntu, tensorflow 2.15: GPU not found", "2.10 was the last"),
    # TensorFlow 2.10 on Windows: a release that had a GPU build
    ("Windows 10, tensorflow-gpu 2.10.0, GPU is not available", "2.10 was the last"),
    # vLLM on Linux named beside Windows only as the user's desktop: WSL named, not native Windows
    ("running vllm inside WSL on my windows laptop: No CUDA runtime is found", "vLLM has no Windows build"),
    # a program's device readout with no install and no GPU named: no guess at the build
    ("the log shows CPU for the encoder stage, is that expected?", "download.pytorch.org/whl/cu"),
    # the user chose the CPU on purpose in code: nothing to read
    ("device = 'cpu'\nmodel.to(device)  # I only want CPU inference here", "download.pytorch.org/whl"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
