"""doctor, round 9 (issue 63): readings of the install families for serving engines and compiled libraries: a CUDA
library or driver older than a binary was built against, a package's compiled part imported under a traceback's
title, and more below. Each paste is written for its reading (another GPU, tool or wording than the mined case that
asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a driver API call (cu + a capital) undefined in another engine's kernels: the driver is older, not the wheel
    ("vllm serve Qwen3-8B fails at start\nImportError: /venv/lib/python3.11/site-packages/vllm/_C.abi3.so: undefined "
     "symbol: cuTensorMapEncodeTiled\nNVIDIA-SMI 515.65.01  Driver Version: 515.65.01\ntorch 2.6.0+cu124", "driver",
     ["upgrade the NVIDIA driver", "CUDA 12.0", "525.60.13"]),
    # a CUDA library's own function (cuBLAS) missing for torch: an older copy of that library comes first
    ("python -c 'import torch'\nOSError: /opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: "
     "undefined symbol: cublasLtGetStatusString", "abi-mismatch", ["libcublas", "nvidia-cublas-cu12",
                                                                    "LD_LIBRARY_PATH"]),
    # NCCL's own function missing when DeepSpeed imports torch: the nccl copy, not the extension
    ("deepspeed --num_gpus 2 train.py\nImportError: libtorch_cuda.so: undefined symbol: ncclCommInitRankConfig",
     "abi-mismatch", ["nccl", "ldconfig -p | grep libnccl"]),
    # pip's cuBLAS needing a newer nvJitLink than the toolkit's on the path: name pip's folder of it
    ("ImportError: /home/u/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12: undefined "
     "symbol: __nvJitLinkCreate_12_4, version libnvJitLink.so.12", "abi-mismatch",
     ["unset LD_LIBRARY_PATH", "nvidia/nvjitlink/lib"]),
    # JAX finding no pip cuDNN (another library than the case), LD_LIBRARY_PATH set to a toolkit
    ("pip install -U \"jax[cuda12]\"\nexport LD_LIBRARY_PATH=/usr/local/cuda-11.8/lib64\n>>> import jax; "
     "jax.devices()\nRuntimeError: Unable to load cuDNN. Is it installed?", "abi-mismatch", ["unset LD_LIBRARY_PATH"]),
    # a package's compiled module named in the title, its traceback below naming the package that imports it
    ("No module named 'amp_C' when training with apex\nTraceback (most recent call last):\n  File "
     "\"/srv/env/lib/python3.10/site-packages/apex/optimizers/fused_adam.py\", line 12, in __init__\n    import "
     "amp_C\nModuleNotFoundError: No module named 'amp_C'", "wheel-platform", ["rebuild apex", "--no-build-isolation"]),
    # a request for a kernel package's wheel built for the user's torch (flash-attn's tag style, another torch)
    ("Please publish flash_attn-2.6.3+cu123torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl, there is no wheel for "
     "torch 2.5 yet", "wheel-platform", ["torch 2.5", "from source"]),
    # a wheel of another CUDA than the environment's torch (exllamav2 next to a cu118 torch): the package's build
    ("pip install exllamav2-0.0.11+cu121-cp311-cp311-linux_x86_64.whl\ntorch 2.1.2+cu118\nexllamav2 fails to load "
     "its extension", "wheel-platform", ["pip install -U exllamav2", "cu121"]),
    # flashinfer past the release that changed its API, with sglang named in a log line
    ("python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct\nflashinfer 0.2.1.post1 installed, the "
     "server crashes with an error at the first request", "wheel-platform", ["flashinfer==0.1.6", "sglang"]),
    # vLLM's CUDA 12 wheel beside a CUDA 11.8 torch, said by torch's own version line
    ("torch==2.3.1+cu118\nINFO: Failed to import from vllm._C with ImportError('libcudart.so.12: cannot open shared "
     "object file: No such file or directory')", "wheel-platform", ["CUDA 12", "+cu118"]),
    # vLLM installed from a PowerShell prompt on Windows
    ("PS C:\\Users\\me> pip install vllm\nerror: the build fails, CUDA_HOME is not set", "wheel-platform",
     ["WSL 2"]),
    # a Linux library of another package's install refused by Windows' loader
    ("C:\\ai\\venv\\Lib\\site-packages\\bitsandbytes\\libbitsandbytes_cuda118.so is either not designed to run on "
     "Windows or it contains an error.", "wheel-platform", ["bitsandbytes", "Windows"]),
    # an undefined symbol inside ollama's own library folder (the /usr/lib one, another runner): the leftover files
    ("ollama serve\nError: llama runner process has terminated: /usr/lib/ollama/cuda_v12/libggml-cuda.so: undefined "
     "symbol: ggml_backend_dev_get_extra_bufts", "abi-mismatch", ["sudo rm -rf /usr/lib/ollama", "install.sh"]),
    # a web UI failing right after git pull (another fork, another error): its venv
    ("SD.Next stopped working after git pull this morning\nTraceback (most recent call last):\n  File "
     "\"launch.py\", line 48\nAttributeError: module 'torch' has no attribute 'float8_e4m3fn'", "abi-mismatch",
     ["delete (or rename) the venv folder"]),
    # vLLM pip-installed on a ROCm machine ending with the CUDA build: its ROCm image or wheels
    ("Installing vllm on ROCm 6.3 (MI300X) with pip falls back to the CUDA wheel, no ROCm wheels for my Python 3.11",
     "wheel-platform", ["rocm/vllm", "3.12"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a CUDA runtime symbol (cuda*, not cu + capital) undefined in an extension: not the driver
    ("ImportError: /venv/lib/python3.10/site-packages/xformers/_C.so: undefined symbol: cudaGetDriverEntryPointByVersion",
     "upgrade the NVIDIA driver"),
    # a torch C++ symbol undefined in an extension: the extension's build, not a CUDA library copy
    ("ImportError: site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
     "_ZN3c104cuda9SetDeviceEi", "ldconfig -p | grep lib"),
    # "Unable to load" said by something other than JAX: not JAX's LD_LIBRARY_PATH reading
    ("ctranslate2: Unable to load cuBLAS. Is it installed? on Windows 11 with faster-whisper", "jax[cuda12]"),
    # a wheel for the torch the environment has, installed fine: no torch-mismatch reading
    ("installed exllamav2-0.2.1+cu121.torch2.4.0-cp310-cp310-linux_x86_64.whl with torch 2.4.0+cu121, works great",
     "whose wheels include torch"),
    ("exllamav2-0.2.1+cu121.torch2.4.0-cp310-cp310-linux_x86_64.whl with torch 2.4.0, no issues at all",
     "whose wheels include torch"),
    # flashinfer at the pinned release: nothing to move back
    ("sglang 0.4.0 with flashinfer 0.1.6 gives an error: CUDA out of memory", "flashinfer==0.1.6"),
    # libcudart.so.12 missing beside a CUDA 12 torch: not the other-CUDA build reading
    ("torch 2.4.0+cu121\nImportError: libcudart.so.12: cannot open shared object file (vllm._C)",
     "move the environment to CUDA"),
    # vLLM installed on Linux: no Windows reading
    ("$ pip install vllm\nerror: CUDA_HOME is not set (Ubuntu 22.04)", "no Windows build"),
    # an undefined symbol in a pip package, no program folder: not the leftover-files reading
    ("ImportError: /venv/lib/python3.10/site-packages/llama_cpp/lib/libllama.so: undefined symbol: ggml_backend_reg",
     "sudo rm -rf"),
    # a web UI error with no update said: not the venv reading
    ("AUTOMATIC1111 webui-user.bat\nRuntimeError: Torch is not able to use GPU", "delete (or rename) the venv"),
    # the user reinstalling torch themselves is not a package replacing it
    ("I have uninstalled pytorch and reinstalled it many times, still Could not run 'torchvision::nms' with arguments "
     "from the 'CUDA' backend", "so nothing else is replaced"),
    # vLLM on ROCm that installed fine: nothing about the CUDA build
    ("vllm 0.9.2 on ROCm 6.4 from the rocm/vllm image serves Llama-3 fine, CUDA graphs enabled", "rocm/vllm"),
    ("vllm 0.9.2 on ROCm 6.4 works, though the docs list CUDA wheels only; no problem here", "rocm/vllm"),
    # GPUDirect Storage's cuFile API (libcufile), not a driver call
    ("ImportError: /venv/lib/python3.11/site-packages/kvikio/_lib/libkvikio.so: undefined symbol: cuFileDriverOpen",
     "upgrade the NVIDIA driver"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
