"""doctor, round 11 (issue 63): readings of the wheel-platform and abi-mismatch families (r11b): bitsandbytes' and
CTranslate2's release tables, a package's CPU and GPU builds installed together, AutoGPTQ's bare "CUDA extension not
installed", an extension linking torch 1.x's split CUDA libraries, a torchvision/torchaudio pinned to another torch.
Each paste is written for its reading (another GPU, tool, version or wording than the mined case that asked for it);
the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # bitsandbytes' CUDA 12.9 binary on Linux (another path, a kohya venv, an RTX 4090): the first release with it
    ("kohya_ss, RTX 4090, torch 2.8.0+cu129\nbitsandbytes.cextension: Could not find the bitsandbytes CUDA binary at "
     "PosixPath('/home/ana/kohya_ss/venv/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cuda129.so')",
     "wheel-platform", ["bitsandbytes>=0.47.0"]),
    # its CUDA 13.0 binary, said by the loader's other words
    ("RTX 5080 with torch 2.9.0+cu130\nWARNING: Configured CUDA binary not found at C:\\ai\\venv\\Lib\\site-packages\\"
     "bitsandbytes\\libbitsandbytes_cuda130.dll", "wheel-platform", ["bitsandbytes>=0.48.0"]),
    # bitsandbytes failing at its own import on Windows 10 (through transformers this time), the traceback cut short
    ("does bitsandbytes work on win10? python 3.11 venv\nTraceback (most recent call last):\n  File \"C:\\work\\"
     "train.py\", line 3, in <module>\n    from transformers import BitsAndBytesConfig\n  File \"C:\\work\\venv\\Lib\\"
     "site-packages\\bitsandbytes\\__init__.py\", line 6, in <module>\n    from . import cuda_setup, utils",
     "wheel-platform", ["bitsandbytes>=0.43.0"]),
    # the cuda_setup-era loader searching the library path on a Kaggle P100 (another notebook, another folder)
    ("Kaggle notebook, P100\n/opt/conda/lib/python3.10/site-packages/bitsandbytes/cuda_setup/main.py:166: UserWarning: "
     "/opt/conda/lib did not contain ['libcudart.so', 'libcudart.so.11.0', 'libcudart.so.12.0'] as expected!",
     "wheel-platform", ["pip install -U bitsandbytes"]),
    # CTranslate2 4.x on a CUDA 11.5 driver, through whisper-ctranslate2 on a GTX 1080
    ("whisper-ctranslate2 audio.mp3 --device cuda\nGTX 1080, NVIDIA-SMI 495.29.05  Driver Version: 495.29.05  CUDA "
     "Version: 11.5\nRuntimeError: CUDA failed with error CUDA driver version is insufficient for CUDA runtime "
     "version", "wheel-platform", ["ctranslate2==3.24.0", "525"]),
    # ctranslate2 4.7.0's Windows wheel, imported through faster-whisper (another error class, another Python)
    ("Windows 11, RTX 3060, pip install faster-whisper ctranslate2==4.7.0\nfrom faster_whisper import WhisperModel\n"
     "FileNotFoundError: [WinError 3] The system cannot find the path specified: 'C:\\Python312\\Lib\\site-packages\\"
     "ctranslate2/../_rocm_sdk_core/bin'", "wheel-platform", ["ctranslate2>=4.7.1"]),
    # a cuDNN 8 file said missing in words, with a requirement's torch floor (cuDNN 9): ctranslate2 4.5 or newer
    ("faster-whisper keeps failing: the missing `libcudnn_cnn_infer.so.8` cannot be found anywhere; our requirements "
     "have torch>=2.6.0 and ctranslate2==4.3.1", "wheel-platform", ["ctranslate2>=4.5.0"]),
    # onnxruntime with its DirectML twin both listed, the session left on the CPU
    ("pip freeze\nonnxruntime==1.17.1\nonnxruntime-directml==1.17.1\nsession.get_providers() shows only "
     "CPUExecutionProvider on my RX 6600", "wheel-platform",
     ["pip uninstall -y onnxruntime onnxruntime-directml", "pip install onnxruntime-directml"]),
    # PaddlePaddle's CPU and GPU packages both listed, paddle compiled without CUDA
    ("pip list | grep paddle\npaddlepaddle       2.5.1\npaddlepaddle-gpu   2.5.1\n>>> paddle.is_compiled_with_cuda()\n"
     "False", "wheel-platform", ["pip uninstall -y paddlepaddle paddlepaddle-gpu", "pip install paddlepaddle-gpu"]),
    # AutoGPTQ's bare warning, nothing about torch or a build (another model, English)
    ("Loading TheBloke/Mistral-7B-Instruct-v0.2-GPTQ prints 'CUDA extension not installed.' and generation crawls at "
     "2 tokens/s", "wheel-platform", ["auto-gptq --no-build-isolation"]),
    # flash-attn's rotary extension linking libtorch_cuda_cpp.so (another csrc module, another library)
    ("  File \"/usr/lib/python3.10/site-packages/flash_attn/layers/rotary.py\", line 9, in <module>\n    import "
     "rotary_emb\nImportError: libtorch_cuda_cpp.so: cannot open shared object file: No such file or directory\n"
     "torch 2.0.1", "abi-mismatch", ["csrc/rotary", "pip uninstall -y rotary_emb"]),
    # apex's extension, not flash-attn: rebuild it against the installed torch
    ("  File \"/opt/apex/apex/normalization/fused_layer_norm.py\", line 12, in <module>\n    import "
     "fused_layer_norm_cuda\nImportError: libtorch_cuda_cu.so: cannot open shared object file: No such file or "
     "directory", "abi-mismatch", ["rebuild fused_layer_norm_cuda against the installed torch"]),
    # torchaudio left from torch 1.13 after an install moved torch to 2.0.1
    ("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.\n"
     "torchaudio 0.13.1+cu117 requires torch==1.13.1, but you have torch 2.0.1 which is incompatible.",
     "wheel-platform", ["torch==2.0.1", "torchvision==0.15.*", "torchaudio==2.0.*"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a bitsandbytes on Windows that is already a Windows release: not the "before 0.43" reading
    ("windows 11\nbitsandbytes 0.45.0\nTraceback (most recent call last):\n  File \"C:\\venv\\Lib\\site-packages\\"
     "bitsandbytes\\__init__.py\", line 15, in <module>", "first release with Windows support"),
    # CTranslate2 on a driver that runs CUDA 12: the driver's own reading, not the CUDA 11 pin
    ("faster-whisper on an RTX 3090\nDriver Version: 535.104.05   CUDA Version: 12.2\nCUDA failed with error CUDA "
     "driver version is insufficient for CUDA runtime version", "ctranslate2==3.24.0"),
    # a CTranslate2 3.x already (a CUDA 11 build) on the 470 driver: not the pin it already has
    ("ctranslate2==3.20.0\nDriver Version: 470.182.03   CUDA Version: 11.4\nCUDA failed with error CUDA driver version "
     "is insufficient for CUDA runtime version", "last CUDA 11 build"),
    # ctranslate2 4.7.0 on Linux with its ROCm SDK path: not the Windows wheel's row
    ("Ubuntu 24.04, RX 7900 XTX, ctranslate2 4.7.0\nOSError: cannot open /usr/lib/python3/site-packages/"
     "_rocm_sdk_core/lib/libamdhip64.so", "is the broken release"),
    # only onnxruntime-gpu listed, left on the CPU: no twin to remove
    ("pip list\nonnxruntime-gpu 1.18.0\nonly CPUExecutionProvider is available", "keep only onnxruntime-gpu"),
    # AutoGPTQ built from the user's own checkout: not the wheel reading
    ("git clone AutoGPTQ && pip install . finished, but still 'CUDA extension not installed.'", "--no-build-isolation"),
    # torch's merged libtorch_cuda.so missing (a CPU torch, not an old extension): not the split-build reading
    ("import flash_attn_2_cuda\nImportError: libtorch_cuda.so: cannot open shared object file: No such file or "
     "directory", "split CUDA"),
    # another package's pin on torch (xformers), not a torchvision or torchaudio: not the companions' fix
    ("xformers 0.0.22 requires torch==2.0.1, but you have torch 2.1.0 which is incompatible.", "torchvision=="),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
