"""doctor, round 7 (issue 63): the install families' readings made from batch 6's training pastes (rules/libraries.py,
rules/releases.py and install/), each held against pastes written for the reading - another GPU, tool, library,
release or wording than the case it came from - and a negative that keeps it out of a paste it does not fit."""

from __future__ import annotations

import pytest

from steadytune.doctor.diagnose import diagnose_text
from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # a distribution's own ROCm package chosen over the exact release AMD's metapackage pins
    ("sudo apt install rocm-hip-libraries\nThe following packages have unmet dependencies:\n"
     " rocm-hip-libraries : Depends: rocm-smi-lib (= 7.0.0.60200-66~24.04) but 5.7.1-1 is to be installed\n"
     "E: Unable to correct problems, you have held broken packages.",
     "wheel-platform", ["sudo apt remove rocm-smi-lib", "Pin-Priority", "sudo apt install rocm-hip-libraries"]),
    # MIOpen's kernel packages under their ROCm 5.5+ name, for the GPU and CU count the old name gave
    ("ROCm 6.0 on an RX 6800\nE: Unable to locate package miopenkernels-gfx1030-60kdb", "rocm-libs-missing",
     ["miopen-hip-gfx1030-60kdb"]),
    # a release another one pins exactly that the index does not have
    ("$ uv pip install vllm==0.9.9\n  × No solution found when resolving dependencies:\n"
     "  ╰─▶ Because there is no version of xformers==0.0.99 and vllm==0.9.9 depends on\n"
     "      xformers==0.0.99, we can conclude that vllm==0.9.9 cannot be used.",
     "wheel-platform", ["pip index versions xformers", "vllm<0.9.9"]),
    # LLaMA-Factory's own version gate, its message and a Chinese complaint
    ("llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml\nImportError: peft>=0.11.1,<=0.12.0 is required "
     "for a normal functioning of this module, but found peft==0.13.2.", "wheel-platform",
     ["DISABLE_VERSION_CHECK=1", "peft"]),
    ("用LLaMA-Factory微调Qwen3，模型要求transformers版本>=4.51.0，但是llamafactory需要transformers<=4.50.0，怎么办？",
     "wheel-platform", ["DISABLE_VERSION_CHECK=1", "transformers"]),
    # a model's remote code whose optional imports old transformers counted as required
    ("model = AutoModelForCausalLM.from_pretrained('internlm/internlm2-7b', trust_remote_code=True)\n"
     "ImportError: This modeling file requires the following packages that were not found in your environment: "
     "einops, flash_attn. Run `pip install einops flash_attn`", "wheel-platform", ["transformers>=4.31.0", "einops"]),
    # ctranslate2 and torch disagreeing on the cuDNN major, both ways, and pip's cuDNN off the loader's path
    ("faster-whisper large-v3 on an RTX 3060\nUnable to load any of {libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, "
     "libcudnn_cnn.so.9, libcudnn_cnn.so}\npip freeze: torch==2.1.2+cu121", "wheel-platform", ["ctranslate2==4.4.0"]),
    ("whisperx audio.wav --model large-v2\nCould not load library libcudnn_cnn_infer.so.8. Error: "
     "libcudnn_cnn_infer.so.8: cannot open shared object file: No such file or directory\ntorch 2.6.0",
     "wheel-platform", ["ctranslate2>=4.5.0"]),
    ("ctranslate2 4.6.0 on Ubuntu 24.04, L4 GPU\nUnable to load any of {libcudnn_ops.so.9.1.0, libcudnn_ops.so.9.1, "
     "libcudnn_ops.so.9, libcudnn_ops.so}", "rocm-libs-missing", ["LD_LIBRARY_PATH", "nvidia.cudnn"]),
    # a cuDNN minor older than the one the binary was built against
    ("tensorflow 2.12 on an A10\nE tensorflow/compiler/xla/stream_executor/cuda/cuda_dnn.cc:417] Loaded runtime CuDNN "
     "library: 8.1.0 but source was compiled with: 8.6.0.", "wheel-platform", ["8.6.0", "nvidia-cudnn"]),
    # pip's CUDA library shadowed by the system's on LD_LIBRARY_PATH
    ("ImportError: /home/u/venv/lib/python3.12/site-packages/torch/lib/../../nvidia/cublas/lib/libcublas.so.12: "
     "undefined symbol: cublasLtGetStatusString, version libcublasLt.so.12", "abi-mismatch",
     ["unset LD_LIBRARY_PATH"]),
    # the unversioned libcuda.so a driver-only install lacks; under WSL 2 its folder on the loader's path
    ("bitsandbytes on a runtime image\nOSError: libcuda.so: cannot open shared object file: No such file or directory\n"
     "$ ls /usr/lib/x86_64-linux-gnu | grep libcuda\nlibcuda.so.1\nlibcuda.so.550.54.14", "rocm-libs-missing",
     ["ln -s libcuda.so.1"]),
    ("Ubuntu 22.04 under WSL2\nCould not load library libcuda.so. Error: libcuda.so: cannot open shared object file\n"
     "$ ls /usr/lib/wsl/lib\nlibcuda.so.1  libd3d12.so  libdxcore.so", "wsl", ["/usr/lib/wsl/lib"]),
    # Windows' restricted DLL search for a program's own ctypes load
    ("Failed to load HIP: Could not find module 'D:\\apps\\comfy\\hip\\rocblas.dll' (or one of its dependencies). "
     "Try using the full path with constructor syntax.", "rocm-libs-missing", ["winmode=0", "add_dll_directory"]),
    # a ROCm command-line tool missing one of its Python modules
    ("$ rocm-smi --showuse\nTraceback (most recent call last):\nModuleNotFoundError: No module named 'yaml'",
     "rocm-libs-missing", ["sudo python3 -m pip install PyYAML"]),
    # onnxruntime-gpu built for the other CUDA major, both ways
    ("onnxruntime-gpu==1.18.1, CUDA 12.4, RTX 4080\n[W:onnxruntime:Default] Failed to create CUDAExecutionProvider. "
     "Require cuDNN 8.* and CUDA 11.*", "wheel-platform", ["onnxruntime-gpu>=1.19"]),
    ("onnxruntime-gpu 1.20.1 with CUDA 11.8 on a T4\nFailed to load library libonnxruntime_providers_cuda.so with "
     "error: libcublasLt.so.12: cannot open shared object file", "wheel-platform", ["onnxruntime-cuda-11"]),
    # a library that needs a GPU torch cannot see: the CPU torch, reinstalled for the vendor named
    ("BitsAndBytesConfig(load_in_4bit=True) on an RTX 3090\nRuntimeError: No GPU found. A GPU is needed for "
     "quantization.", "torch-build", ["torch.cuda.is_available()", "download.pytorch.org/whl/cu"]),
    ("RX 7900 XTX, GPTQ model\nRuntimeError: No GPU found. A GPU is needed for quantization.", "torch-build",
     ["whl/rocm"]),
    # ncurses 5's library on a distribution that moved to ncurses 6
    ("hipcc on Fedora 40\nImportError: libtinfo.so.5: cannot open shared object file: No such file or directory",
     "rocm-libs-missing", ["ncurses-compat-libs", "libtinfo5"]),
    # HIP's device bitcode outside the ROCm root
    ("clang: error: cannot find ROCm device library; provide its path via '--rocm-path' or '--rocm-device-lib-path', "
     "or pass '-nogpulib' to build without ROCm device library", "rocm-libs-missing", ["HIP_DEVICE_LIB_PATH"]),
    # no wheel at all for this Python: the one below it, never above 3.12
    ("ERROR: Could not find a version that satisfies the requirement torch-directml (from versions: none)\n"
     "Python 3.12.4 on Windows 11, RX 6600", "wheel-platform", ["uv venv -p 3.11"]),
    ("py -3.13 -m venv env\nERROR: Could not find a version that satisfies the requirement torch-directml (from "
     "versions: none)", "wheel-platform", ["uv venv -p 3.12"]),
    # conda's unpinned torchvision / torchaudio beside a pytorch-cuda
    ("conda install torchvision torchaudio pytorch-cuda=12.1 -c pytorch -c nvidia\ntorch.cuda.is_available() -> "
     "False on my RTX 4070", "torch-build", ["pytorch=2.1.2 torchvision=0.16.2", "pytorch-cuda=12.1"]),
    # the CUDA Toolkit said not installed
    ("LM Studio on Windows 11 with an RTX 3060: the CUDA runtime isn't installed and loading any model with GPU "
     "offload fails", "rocm-libs-missing", ["CUDA Toolkit"]),
    # CTranslate2's own wording for a cuBLAS of another CUDA major, either way
    ("whisperx in the nvidia/cuda:12.4.1-runtime image\nRuntimeError: Library libcublas.so.11 is not found or cannot be "
     "loaded", "rocm-libs-missing", ["CUDA 11's cuBLAS", "nvidia-cublas-cu11", "ctranslate2>=4"]),
    ("faster-whisper 1.1 on CUDA 11.8\nRuntimeError: Library libcublas.so.12 is not found or cannot be loaded",
     "rocm-libs-missing", ["nvidia-cublas-cu12", "ctranslate2==3.24.0"]),
    # cuDNN failing at its first call: cuDNN for this CUDA (jax's own extra), else the memory taken first
    ("import jax; jax.numpy.zeros(4) on an RTX 2060\nE external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439] Could "
     "not create cudnn handle: CUDNN_STATUS_NOT_INITIALIZED", "rocm-libs-missing",
     ["nvidia-cudnn-cu12", "jax[cuda12]", "XLA_PYTHON_CLIENT_PREALLOCATE=false"]),
    # a wheel built for another ROCm major than the stack
    ("triton-rocm wants ROCm 6's libamdhip64.so.6 but ROCm 5.7 is what this machine has", "wheel-platform",
     ["ROCm 6", "from source"]),
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    assert_a_rule_reads(paste, family, phrases)


@pytest.mark.parametrize("how", PASTINGS)
def test_every_reading_survives_how_it_is_pasted(how):
    misses = pasting_misses(READINGS, how)
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("paste,not_said", [
    # apt's unmet dependency on a package that is not ROCm's
    ("python3-foo : Depends: libc6 (= 2.39-0ubuntu8) but 2.40-1 is to be installed", "sudo apt remove"),
    # the new MIOpen name not found is not the rename
    ("E: Unable to locate package miopen-hip-gfx1030kdb", "has a new name"),
    # uv saying the release exists for other Pythons: the Python reading, not an unpublished pin
    ("  ╰─▶ Because there is no version of torch==2.1.0 and you require torch==2.1.0, we can conclude that your "
     "requirements are unsatisfiable.\n  hint: torch was found, but wheels are available for a different Python "
     "(you have Python 3.13)", "pip index versions torch"),
    # a version requirement without LLaMA-Factory
    ("Qwen3 requires transformers>=4.51.0, I have 4.50.0", "DISABLE_VERSION_CHECK"),
    # a plain missing module is not remote code's check
    ("ModuleNotFoundError: No module named 'einops'", "4.31.0"),
    # torch's own cuDNN missing, no ctranslate2
    ("import torch\nOSError: libcudnn.so.9: cannot open shared object file: No such file or directory", "ctranslate2"),
    # an undefined symbol in an extension, not in pip's nvidia libraries
    ("ImportError: /venv/lib/python3.11/site-packages/torchaudio/lib/libtorchaudio.so: undefined symbol: "
     "_ZN3c104cuda9SetDeviceEi", "unset LD_LIBRARY_PATH"),
    # libcuda.so.1 itself missing: the driver, not a development link
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory", "ln -s libcuda.so.1"),
    # a package's own DLL in site-packages: its wheels, not Windows' search
    ("FileNotFoundError: Could not find module 'C:\\venv\\Lib\\site-packages\\llama_cpp\\lib\\llama.dll' (or one of its "
     "dependencies). Try using the full path with constructor syntax.", "winmode=0"),
    # a training script's missing module beside a rocm-smi listing far above it
    ("$ rocm-smi\nGPU  Temp  AvgPwr\n0    45c   30W\n\n$ python train.py\nTraceback (most recent call last):\n"
     "  File \"train.py\", line 3, in <module>\n    import yaml\nModuleNotFoundError: No module named 'yaml'",
     "sudo python3 -m pip install PyYAML"),
    # onnxruntime-gpu of the right major: not the major reading
    ("onnxruntime-gpu 1.19.2, CUDA 12.2\nFailed to create CUDAExecutionProvider", "is a CUDA 11.8 build"),
    # a driver failure beside the quantizer's complaint: the driver speaks
    ("Failed to initialize NVML: Driver/library version mismatch\nRuntimeError: No GPU found. A GPU is needed for "
     "quantization.", "reinstall the CUDA build of torch"),
    # a fully pinned conda line
    ("conda install pytorch==2.1.2 torchvision==0.16.2 torchaudio==2.1.2 pytorch-cuda=12.1 -c pytorch -c nvidia\n"
     "torch.cuda.is_available() False, RTX 4070", "pin all three"),
    # a runtime module missing (a kernel not built) is not a wheel missing for this Python
    ("WARN text_generation_launcher: Could not import Flash Attention enabled models: No module named "
     "'dropout_layer_norm'", "use a Python the index builds for"),
    # cuDNN's handle failing beside an out-of-memory line: the memory, not a missing cuDNN
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nCould not create cudnn handle: "
     "CUDNN_STATUS_INTERNAL_ERROR", "install cudnn for the installed cuda"),
])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, not_said):
    top = diagnose_text(paste).top
    assert top is None or not_said.lower() not in (top.fix + " " + top.title).lower(), (top.family, top.fix)


def test_a_python_mismatch_said_by_pip_keeps_its_python_reading():
    # pip's own "requires a different Python" is an installer saying no release fits: the Python fix, not silence
    report = diagnose_text("ERROR: Package 'vllm' requires a different Python: 3.8.10 not in '>=3.9'")
    top = report.top
    assert top is not None and not report.by_likeness and top.family == "wheel-platform"
    assert "python" in top.fix.lower()
