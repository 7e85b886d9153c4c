"""doctor, round 10 (issue 63): readings asked for by round 9's spent held-out cases (batch 8, spent_heldout), with
machine.py and runtime.py left alone (new modules instead). Each paste is written for its reading (another GPU, tool
or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, assert_no_rule_says, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # a release that lost the GPU's arch: the previous one ran (ollama on a GTX 1080, not koboldcpp on a 1070 Ti)
    ("After upgrading ollama from 0.3.9 to 0.3.10 my GeForce GTX 1080 fails:\nCUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["0.3.9", "sm_61"]),
    # a server's out-of-memory message naming the flag to lower (TGI on 4x L4, another budget than the case)
    ("text-generation-launcher --model-id meta-llama/Llama-2-13b-chat-hf --num-shard 4 --max-batch-total-tokens "
     "32000\nError: Warmup(Generation(\"Not enough memory to handle 32000 total tokens with 4096 prefill tokens. You "
     "need to decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`\"))", "out-of-memory",
     ["--max-batch-total-tokens (now 32000)", "--max-batch-prefill-tokens"]),
    # a llama.cpp server running out as a 32k context fills (not Ollama, not a 4090): its batch flags
    ("llama-server -m qwen2.5-32b-instruct-q4_k_m.gguf -c 32768 -ngl 99 on an RTX 3090\n"
     "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 3200.00 MiB on device 0: cudaMalloc failed: out of memory",
     "out-of-memory", ["-b 256 -ub 256"]),
    # Ollama with a long context said in words: num_batch
    ("ollama: long context prompts (32k context) crash with CUDA error: out of memory on my RTX 3060 12GB",
     "out-of-memory", ["num_batch"]),
    # rocBLAS reading Tensile from the pre-5.2 component folder (torch on an MI210 with ROCm 5.6, not TensorFlow)
    ("python -c 'import torch; torch.ones(4,4).cuda() @ torch.ones(4,4).cuda()' on an Instinct MI210, ROCm 5.6.0\n"
     "rocBLAS error: Cannot read /opt/rocm-5.6.0/rocblas/lib/library/TensileLibrary.dat: No such file or directory",
     "rocm-libs-missing", ["ROCBLAS_TENSILE_LIBPATH=/opt/rocm-5.6.0/lib/rocblas/library", "LD_LIBRARY_PATH"]),
    # the loader cache shown without libcuda, in a torch.compile run on an A100 (not Triton's source build on an H100)
    ("torch.compile fails on a fresh A100 server after installing driver 550\n"
     "checked: ldconfig -p | grep libcuda returns nothing", "rocm-libs-missing", ["sudo ldconfig"]),
    # date-numbered uploads outranking the real releases (TensorFlow's cuDNN via pip index, not jax's extra)
    ("TensorFlow 2.13 does not find cuDNN after pip install nvidia-cudnn-cu11\n$ pip index versions nvidia-cudnn-cu11\n"
     "Available versions: 2022.5.19, 2022.4.2, 2022.1.13, 8.9.4.25, 8.6.0.163\nCould not load dynamic library "
     "'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file", "wheel-platform",
     ["nvidia-cudnn-cu11==8.9.4.25"]),
    # torch's CUDA check failing inside pip's isolated build (auto-gptq with nvcc 12.4 against a cu121 build torch)
    ("pip install auto-gptq --no-binary auto-gptq\n  File \"/tmp/pip-build-env-k2j8x/overlay/lib/python3.11/site-packages/"
     "torch/utils/cpp_extension.py\", line 413, in _check_cuda_version\n  RuntimeError: The detected CUDA version "
     "(12.4) mismatches the version that was used to compile PyTorch (12.1). Please make sure to use the same CUDA "
     "versions.", "abi-mismatch", ["CUDA_HOME=/usr/local/cuda-12.1", "--no-build-isolation"]),
    # a GPU chosen by the variable staying idle while another fills (vLLM on A100s, "GPU 2 is empty", not sglang)
    ("export CUDA_VISIBLE_DEVICES=2\nvllm serve Qwen/Qwen2.5-14B-Instruct\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 1.50 GiB\nnvidia-smi shows GPU 2 is empty, the memory goes to GPU 0 where my other job runs",
     "visibility", ["CUDA_VISIBLE_DEVICES=2 <the command>"]),
    # installing a Linux-only engine on Windows said in words, Windows misspelled "window 10" (sglang, not vLLM)
    ("Problem installing sglang on my laptop (window 10), RTX 3060", "wheel-platform", ["WSL"]),
    # CUDA installed and the program finding none, in Chinese (torch itself, Windows 10, CUDA 11.8)
    ("装了CUDA 11.8，但是torch检测不到cuda，系统Windows 10，显卡RTX 3060", "torch-build",
     ["download.pytorch.org/whl/cu", "torch.version.cuda"]),
    # the same said in English by a web UI's user
    ("CUDA 12.4 is installed but text-generation-webui says CUDA is not available (GeForce RTX 4070)", "torch-build",
     ["download.pytorch.org/whl/cu"]),
    # pip's record of a ROCm torch swapped out by another package's install (xformers on Linux, not unsloth's uv)
    ("pip install -U xformers on my RX 7900 XTX box\nAttempting uninstall: torch\n    Found existing installation: "
     "torch 2.6.0+rocm6.2.4\n    Uninstalling torch-2.6.0+rocm6.2.4:\nSuccessfully installed torch-2.7.0 "
     "xformers-0.0.30\nnow torch.cuda.is_available() is False", "torch-build",
     ["torch==2.6.0+rocm6.2.4", "--no-deps"]),
    # a tool's documented compute-capability floor asked about on an older card (AutoAWQ on a P100, not a V100)
    ("Does autoawq work on a Tesla P100? I want to quantize Mistral 7B", "gpu-unsupported", ["7.5", "GPTQ"]),
    # flash-attn's floor asked about on a Turing card, no error line
    ("can't get flash-attn to work on my RTX 2080 Ti, is it supported?", "gpu-unsupported", ["sdpa"]),
    # an nvcc of another CUDA release in a JIT build (a torch extension on an H100: nvcc 12.8, torch cu124)
    ("torch 2.5.1+cu124 on an H100, nvcc --version: Cuda compilation tools, release 12.8, V12.8.61\n"
     "RuntimeError: Error building extension 'fused_adam': JIT compilation failed", "wheel-platform",
     ["nvidia-cuda-nvcc-cu12==12.4.*", "CUDA_HOME"]),
    # a crash on an AMD card nobody names (ComfyUI with ROCm 6.0, not the A1111 web UI)
    ("ComfyUI on my AMD graphics card with ROCm 6.0\n$ python main.py\nSegmentation fault (core dumped)",
     "arch-missing", ["HSA_OVERRIDE_GFX_VERSION=11.0.0", "rocminfo"]),
    # Jan with GPU acceleration on and a model that will not start, on an NVIDIA card (an RTX 3050 laptop, Llama 3)
    ("Turned on GPU Acceleration in Jan for my NVIDIA GeForce RTX 3050 Laptop GPU. Now Jan can't load anything: "
     "the model failed to start (Llama 3 8B Q4)", "rocm-libs-missing", ["CUDA Toolkit"]),
    # a ZLUDA install step on Windows 11 not finding the HIP SDK (ComfyUI-Zluda, HIP SDK 6.2, said differently)
    ("Windows 11, HIP SDK 6.2.4 installed. ComfyUI-Zluda install.bat fails: cannot find HIP SDK, zluda not installed",
     "rocm-libs-missing", ["%HIP_PATH%bin", "PATH"]),
    # READINGS-END
]


@pytest.mark.parametrize("paste,family,phrases", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases):
    assert_a_rule_reads(paste, family, phrases)


@pytest.mark.parametrize("how", PASTINGS)
def test_every_reading_survives_how_it_is_pasted(how):
    misses = pasting_misses(READINGS, how)
    assert not misses, "\n".join(misses)


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # the same error with no earlier release that ran: not a release that dropped the arch
    ("ollama 0.3.10 on a GeForce GTX 1080\nCUDA error: no kernel image is available for execution on the device",
     "go back to"),
    # Ollama out of memory with no long context: the model's size, not the prompt batch
    ("ollama run llama3:70b on an RTX 4060\nCUDA error: out of memory", "num_batch"),
    # a training run's out-of-memory names no server flag: not the budget reading
    ("python train.py --per_device_train_batch_size 8\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
     "2.00 GiB", "as the message says"),
    # the Tensile file missing in the current folder for an RDNA2 card: the arch, not the old folder
    ("RX 6700 XT\nrocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek",
     "drop /opt/rocm/rocblas/lib"),
    # the cache lists libcuda: not a cache to rebuild
    ("torch.compile fails on an A100\n$ ldconfig -p | grep libcuda\n\tlibcuda.so.1 (libc6,x86-64) => "
     "/lib/x86_64-linux-gnu/libcuda.so.1\nRuntimeError: Triton Error [CUDA]: invalid argument", "rebuild the cache"),
    # a release list with no date-numbered uploads: nothing outranks the real ones
    ("pip install torch==2.0.5\nERROR: Could not find a version that satisfies the requirement torch==2.0.5 (from "
     "versions: 2.0.0, 2.0.1, 2.1.0)\nAvailable versions: 2.1.0, 2.0.1, 2.0.0", "date-numbered"),
    # the same check outside an isolated build: the user's own torch, not the build environment's
    ("python setup.py install\n  File \"/home/me/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py\", "
     "line 413, in _check_cuda_version\nRuntimeError: The detected CUDA version (12.4) mismatches the version that was "
     "used to compile PyTorch (11.8). Please make sure to use the same CUDA versions.", "build against your own torch"),
    # the chosen GPU is the one that fills: a plain out-of-memory, not a choice that was not taken
    ("export CUDA_VISIBLE_DEVICES=1\nvllm serve Qwen/Qwen2.5-14B-Instruct\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 1.50 GiB\nonly GPU 1 is filled, the others are idle", "spelled exactly"),
    # installing the engine on Linux: nothing says Windows
    ("Problem installing sglang on my Ubuntu 22.04 server, RTX 3060", "WSL"),
    # a CUDA torch shown: the build is not the cause
    ("CUDA 12.4 is installed, torch 2.5.1+cu124, but CUDA is not available (GeForce RTX 4070)",
     "pip uninstall -y torch torchvision torchaudio"),
    # an AMD card: ROCm's torch, not pytorch.org's CUDA index
    ("I installed CUDA but torch says CUDA is not available, my GPU is a Radeon RX 7900 XTX", "whl/cu"),
    # a CUDA torch upgraded on Linux by the same record: PyPI's torch is a CUDA build there, not this reading
    ("pip install -U xformers\nFound existing installation: torch 2.6.0+cu124\nSuccessfully installed torch-2.7.0 "
     "xformers-0.0.30\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "--no-deps"),
    # the same question about a card above the floor: not unsupported
    ("Does autoawq work on an RTX 4090? I want to quantize Mistral 7B", "does not run on"),
    # the nvcc of torch's own CUDA: not a mixed toolchain
    ("torch 2.5.1+cu124 on an H100, nvcc --version: Cuda compilation tools, release 12.4, V12.4.131\n"
     "RuntimeError: Error building extension 'fused_adam': JIT compilation failed", "nvidia-cuda-nvcc"),
    # the same crash with the override already set: not the missing override
    ("ComfyUI on my AMD graphics card with ROCm 6.0\n$ HSA_OVERRIDE_GFX_VERSION=10.3.0 python main.py\nSegmentation "
     "fault (core dumped)", "for a consumer card, run with the override"),
    # a crash on an NVIDIA card: nothing of ROCm
    ("ComfyUI on my NVIDIA card\n$ python main.py\nSegmentation fault (core dumped)", "HSA_OVERRIDE_GFX_VERSION"),
    # a model that fails to start in another program: not Jan's CUDA engine
    ("Turned on GPU offload in LM Studio for my NVIDIA GeForce RTX 3050. Now the model failed to start", "CUDA Toolkit"),
    # the same words on Linux: no HIP SDK installer there
    ("Ubuntu 24.04, ROCm 6.2. The ZLUDA build fails: cannot find HIP SDK", "%HIP_PATH%bin"),
    # NEGATIVES-END
]


@pytest.mark.parametrize("paste,not_said", NEGATIVES, ids=[n[0][:48] for n in NEGATIVES])
def test_a_reading_stays_out_of_a_paste_it_does_not_fit(paste, not_said):
    assert_no_rule_says(paste, not_said)
