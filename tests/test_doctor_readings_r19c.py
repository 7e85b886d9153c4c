"""doctor, round 19 (r19c): readings for missed training cases of Python packages, wheels, ABI and memory: JAX's up-front
GPU memory and its allocator variable set after an import that started JAX, Windows' CUDA sysmem fallback, vLLM's
prefix-prefill Triton kernel before Ampere, a capability floor the library's message states (half-precision cuFFT),
ChatGLM's quantize() kernels, a pre-Turing GPU left on the CPU by a CUDA 13 / cu128 build, TensorFlow 1.x built for
another cuDNN, CuPy installed twice, ColossalAI without its CUDA extension, a system cuDNN loaded before pip's,
PaddlePaddle on a Blackwell GPU, ctranslate2's short "Library libcublas.so.12 is not found" (with cuDNN next), and
torch 2.0's SDPA is_sm80 check with no flash-attn in the paste, and a
requirements install whose --extra-index-url CUDA index lost to PyPI's torch. Each paste is written for its reading (another GPU,
tool, version or wording than the mined case that asked for it); the negatives keep each reading out of pastes it does
not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a Flax training script: the memory said taken before any step
    ("Flax 0.8 / jax 0.4.30 on an RTX 4090. Right after import, before any training step, nvidia-smi shows 18 GB "
     "used by my python process. Is my CUDA install broken?", "out-of-memory",
     ["XLA_PYTHON_CLIENT_PREALLOCATE=false", "XLA_PYTHON_CLIENT_MEM_FRACTION"]),
    # numpyro said idle, "preallocated" in words
    ("numpyro model on an A6000 with jax[cuda12]: the process is idle but 36GB of memory is preallocated already",
     "out-of-memory", ["XLA_PYTHON_CLIENT_PREALLOCATE"]),
    # the variable set after a JAX library's import, another library and variable
    ("import os\nimport jax\nimport optax\nimport equinox as eqx\nos.environ['XLA_PYTHON_CLIENT_MEM_FRACTION'] = '.40'"
     "  # no effect, still 75% taken", "env-not-applied",
     ["XLA_PYTHON_CLIENT_MEM_FRACTION", "before any import", "export"]),
    # the library whose import ran a JAX op, named
    ("import jax.numpy as jnp\nimport augmax\nos.environ[\"XLA_PYTHON_CLIENT_ALLOCATOR\"] = \"platform\"",
     "env-not-applied", ["XLA_PYTHON_CLIENT_ALLOCATOR", "augmax>=0.3.3"]),
    # Windows, an image trainer crawling, shared GPU memory named
    ("kohya_ss LoRA training on Windows 11 with an RTX 4060 8GB: it/s dropped to 40 s/it, extremely slow, and Task "
     "Manager shows shared GPU memory usage at 6 GB", "out-of-memory", ["Sysmem Fallback", "python.exe"]),
    # the same complaint in Chinese, another card
    ("RVC训练特别慢，4060显存不够吗？进度条不动了", "out-of-memory", ["Prefer No Sysmem Fallback"]),
    # vLLM serving on a T4, no trainer
    ("vllm serve Qwen/Qwen2.5-7B-Instruct --dtype half on a Tesla T4\npython3: /project/lib/Analysis/Allocation.cpp:43: "
     "Assertion `!(srcMmaLayout && dstMmaLayout && !srcMmaLayout.isAmpere()) && \"mma -> mma layout conversion is "
     "only supported on Ampere\"' failed.", "attention", ["enable_prefix_caching=False", "enable_chunked_prefill=False"]),
    # TRL's GRPOTrainer on V100s
    ("GRPOTrainer with use_vllm=True on 4x V100 32GB crashes at the first generation step:\nAssertion failed: mma -> "
     "mma layout conversion is only supported on Ampere", "attention", ["vllm_enable_prefix_caching=False"]),
    # the stated floor for another card and wording of the same check
    ("Tesla M60 (SM_52), fp16 STFT in a vocoder:\nRuntimeError: cuFFT doesn't support signals of half type with "
     "compute capability less than SM_53, but the device containing input half tensor only has SM_52",
     "gpu-unsupported", ["too old", "5.3", "full precision"]),
    # ChatGLM2 int8 on a Maxwell card (compute capability 5.2, under the kernels' sm_61 floor; a GTX 10xx at 6.1 has
    # code in them: cpm_kernels' cuda/Makefile and ChatGLM's embedded fatbin carry sm_61 to sm_86 cubins)
    ("ChatGLM2-6B on a GTX 980: model = AutoModel.from_pretrained(path, trust_remote_code=True).quantize(8).cuda()\n"
     "RuntimeError: CUDA Error: no kernel image is available for execution on the device", "gpu-unsupported",
     ["6.1", "without quantize()"]),
    # the same quantize on an H100: above cpm_kernels' list
    ("H100 80GB, chatglm quantize(4)\n  File \".../cpm_kernels/library/cuda.py\", line 216, in checkCUStatus\n"
     "RuntimeError: CUDA Error: no kernel image is available for execution on the device", "arch-missing",
     ["compute_90", "cpm_kernels"]),
    # a Pascal card left on the CPU after a ComfyUI update
    ("After updating ComfyUI portable yesterday my GTX 1080 Ti is ignored, everything runs on the CPU now. Worked fine "
     "on previous versions.", "arch-missing", ["cu126", "sm_61"]),
    # TensorFlow 1.x built for cuDNN 6 on a cuDNN 7 machine
    ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:378] Loaded runtime CuDNN library: 7005 (compatibility version "
     "7000) but source was compiled with 6021 (compatibility version 6000).", "abi-mismatch",
     ["tensorflow-gpu==1.12.0", "cuDNN 6.0"]),
    # CuPy's own warning about two packages, CUDA 11
    ("UserWarning: CuPy may not function correctly because multiple CuPy packages are installed in your environment:\n"
     "  cupy-cuda11x, cupy-cuda12x", "wheel-platform", ["pip uninstall", "cupy-cuda11x"]),
    # another missing piece of a half-overwritten cupy
    ("pip install cupy-cuda12x on top of an older cupy\n>>> cupy.fft.fft(x)\nAttributeError: module 'cupy' has no "
     "attribute 'fft'", "wheel-platform", ["pip uninstall", "cupy-cuda12x"]),
    # ColossalAI's message in another run
    ("colossalai 0.1.8, torch 1.11+cu113. Training with MoE prints: if you want to activate cuda mode for moe, please "
     "install with cuda_ext!", "torch-build", ["colossalai.org/download", "NO_CUDA_EXT=1"]),   # 0.1.x: built by default
    # a system cuDNN in a CUDA 12 toolkit folder shadowing pip's, another library of the set
    ("Could not load library libcudnn_ops_train.so.8. Error: /usr/local/cuda-12.1/lib64/libcudnn_ops_train.so.8: "
     "undefined symbol: _ZN5cudnn3ops18DropoutForwardInternalEv, version libcudnn_ops_infer.so.8\nRuntimeError: GET "
     "was unable to find an engine to execute this computation", "abi-mismatch",
     ["LD_LIBRARY_PATH", "nvidia/cudnn/lib", "/usr/local/cuda-12.1/lib64"]),
    # PaddleX on an RTX 5090, Windows, no version
    ("PaddleX 3.0 on Windows 11 with an RTX 5090: paddle says the GPU is not supported and falls back to CPU",
     "arch-missing", ["cu129", "paddlepaddle-gpu==3.2.0"]),
    # a WhisperX service on CUDA 11.7, the short message
    ("whisperx service, CUDA 11.7, driver 535.104\nRuntimeError: Library libcublas.so.12 is not found",
     "rocm-libs-missing", ["nvidia-cudnn-cu12", "LD_LIBRARY_PATH", "ctranslate2==3.24.0"]),
    # a web UI's requirements with the cu121 extra index on Windows, the GPU never used
    ("Windows 11, RTX 3070\npip install -r requirements.txt --extra-index-url https://download.pytorch.org/whl/cu121\n"
     "AssertionError: Torch not compiled with CUDA enabled", "torch-build", ["--index-url https://download.pytorch.org/"
                                                                           "whl/cu121", "+cu121"]),
    # torch 2.0.1 SDPA on an RTX 4090, no flash-attn package
    ("torch 2.0.1+cu118, training a ViT with head dim 96 on an RTX 4090, loss.backward() fails:\nRuntimeError: "
     "Expected is_sm80 to be true, but got false.", "attention", ["enable_flash_sdp(False)", "nightly/cu118"]),
]

NEGATIVES = [
    # JAX really out of memory on a batch: the batch, not preallocation
    ("jax on an RTX 3090, import fine\njaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
     "trying to allocate 4.00GiB", "XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates"),
    # torch using 18 GB during training is not JAX
    ("torch training on an RTX 4090 uses 18 GB of memory after import of my dataset", "XLA_PYTHON_CLIENT"),
    # the variable set first, then the imports: nothing late
    ("import os\nos.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'false'\nimport jax\nimport optax",
     "after JAX has already started"),
    # slow training on Linux is not the Windows fallback
    ("Ubuntu 22.04, RTX 3060 12GB, training is extremely slow and VRAM is full", "Sysmem Fallback"),
    # a real CUDA OOM on Windows: the out-of-memory readings, not the fallback
    ("Windows 11, training very slow then torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "Sysmem Fallback"),
    # another Triton assertion is not the prefix-prefill kernel
    ("python: /project/lib/Conversion/TritonGPUToLLVM/ElementwiseOpToLLVM.cpp:123: Assertion `false && \"unsupported "
     "conversion\"' failed.", "enable_prefix_caching"),
    # a floor met: the device above the stated one
    ("RuntimeError: cuFFT doesn't support signals of half type with compute capability less than SM_53, but the device "
     "containing input half tensor only has SM_61", "too old for the operation"),
    # an Ada card runs the kernels' sm_86 / sm_80 cubins (same major, higher minor): not "newer than the list"
    ("RTX 4090, chatglm quantize(4)\nRuntimeError: CUDA Error: no kernel image is available for execution on the device",
     "quantize kernels have no code"),
    # no kernel image without quantize is torch's arch reading, not ChatGLM's kernels
    ("RTX 5090, torch 2.3.1+cu121\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "quantize()"),
    # a Turing GPU left on the CPU is not the pre-Turing build reading
    ("After the latest update my RTX 2080 is ignored and everything runs on the CPU", "legacy build that still carries"),
    # a pre-Turing GPU on the CPU after a reinstall, with a CPU torch shown: the CPU-torch reading's
    ("GTX 1070, reinstalled everything, still runs on the CPU. torch 2.5.1+cpu", "CUDA 12.6 build in the program"),
    # a Blackwell GPU running Paddle with no complaint about the GPU
    ("RTX 5090, PaddleOCR 3.0 with paddlepaddle-gpu, how do I set the batch size for recognition?", "cu129"),
    # the CUDA index given alone (--index-url) and still no GPU: not the extra-index reading
    ("pip install torch --index-url https://download.pytorch.org/whl/cu121 --extra-index-url https://download.pytorch."
     "org/whl/cu121\nNo GPU found", "previous-versions page lists"),
    # a pre-Turing GPU on the CPU with nothing new installed
    ("My GTX 1060 is not used, the model runs on the CPU", "CUDA 12.6 build"),
    # the newer TF wording (same major) stays libraries.py's reading
    ("Loaded runtime CuDNN library: 8.0.5 but source was compiled with: 8.1.0.  CuDNN library needs to have matching "
     "major version", "tensorflow-gpu=="),
    # an attribute error of another module is not CuPy's twins
    ("AttributeError: module 'numpy' has no attribute 'float'", "cupy"),
    # ColossalAI's message absent: a plain import error
    ("pip install colossalai\nModuleNotFoundError: No module named 'colossalai'", "colossalai.org/download"),
    # pip's own cuDNN with an undefined symbol is the other reading (system CUDA shadows pip's sibling)
    ("/venv/lib/python3.10/site-packages/nvidia/cudnn/lib/libcudnn_cnn_infer.so.8: undefined symbol: "
     "_ZN11nvrtcHelper4loadEb, version libcudnn_ops_infer.so.8", "a system cuDNN ("),
    # Paddle on a Blackwell GPU already from the cu129 index
    ("RTX 5080, pip install paddlepaddle-gpu==3.2.0 -i https://www.paddlepaddle.org.cn/packages/stable/cu129/\n"
     "paddle OCR is slow", "paddlepaddle-gpu==3.2.0 -i"),
    # Paddle on an Ampere GPU is not the Blackwell reading
    ("PaddleOCR on an RTX 3060 does not detect the GPU, paddlepaddle-gpu 3.1.0", "cu129"),
    # flash-attn 1.x named: its own reading, not torch's SDPA
    ("flash_attn 1.0.9, RTX 3090\n  File \"flash_attn/flash_attn_interface.py\", line 42, in _flash_attn_backward\n"
     "RuntimeError: Expected is_sm80 to be true, but got false.", "enable_flash_sdp(False)"),
    # the bare check line alone, nothing naming torch's SDPA: flash-attn 1.x prints the same words
    ("A10 24GB, finetuning\nRuntimeError: Expected is_sm80 to be true, but got false.", "enable_flash_sdp(False)"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
