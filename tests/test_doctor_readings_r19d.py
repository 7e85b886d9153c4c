"""doctor, round 19 (r19d): readings for missed training cases of desktop image / video apps and their attention,
precision and Windows packaging: a torch wheel's CUDA that is no toolkit to rebuild with, Fooocus's allocator switch
(cuda_malloc), a GTX 16xx card's NaN latents in kohya's trainer (cudnn.benchmark), triton-windows' Visual C++ DLLs,
Pinokio's bin folder, a package installed into another Python than the app's, xformers left behind on a Blackwell
card, SageAttention builds without their kernels or on CUDA before 12.8 or without Triton, FlashAttention 2 asked on
Windows, and fp16 overflowing a bf16 model. Each paste is written for its reading (another GPU, tool, version or
wording than the mined case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a torch wheel (no +cu tag) beside a CUDA release on a Blackwell card: the wheel, not a rebuild
    ("SD.Next on an RTX 5070 Ti, torch 2.4.1, CUDA 12.4 installed\nRuntimeError: CUDA error: no kernel image is "
     "available for execution on the device", "arch-missing", ["cu128"]),
    # Fooocus's allocator, named
    ("Fooocus 2.1 on a Quadro P4000 in a VMware VM\nRuntimeError: CUDA error: operation not supported",
     "gpu-unsupported", ["--disable-async-cuda-allocation", "cuda_malloc"]),
    # a GTX 1650 SUPER training an SDXL LoRA with sd-scripts
    ("python sdxl_train_network.py --mixed_precision fp16 ...\nGPU: GeForce GTX 1650 SUPER 4GB\nRuntimeError: NaN "
     "detected in latents: img_0041.png", "precision", ["cudnn.benchmark", "--no_half_vae"]),
    # triton-windows from SwarmUI's embedded ComfyUI Python
    ("D:\\apps\\SwarmUI\\dlbackend\\comfy\\python_embeded\\python.exe -c \"import triton\"\nImportError: DLL load "
     "failed while importing libtriton: The specified module could not be found.", "rocm-libs-missing",
     ["msvcp140.dll", "vcruntime140_1.dll", "python_embeded"]),
    # Pinokio's loop with conda, on Linux
    ("Pinokio 2.15 on Ubuntu 22.04: installing Applio says conda is not installed, I click Install, it completes, "
     "and the same dialog comes back every time", "rocm-libs-missing", ["bin", "pinokio\\api"]),
    # an xformers wheel into a Python that has no torch, for Forge
    ("Forge says No module 'xformers'. Proceeding without it.\nC:\\Users\\me> pip install xformers-0.0.28.post3-cp311-"
     "cp311-win_amd64.whl\nCollecting torch==2.5.1 (from xformers==0.0.28.post3)\n  Downloading torch-2.5.1-cp311-cp311-"
     "win_amd64.whl (203.1 MB)", "wheel-platform", ["venv\\Scripts\\python.exe -m pip", "cp311", "--no-deps"]),
    # triton in the user-wide Python, ComfyUI portable on its own
    ("I installed triton-windows into my user-wide python and the test prints tensor([0., 0., 0.]).\nIn "
     "ComfyUI_windows_portable the compile node still says: Cannot find a working triton installation.",
     "env-not-applied", ["python_embeded\\python.exe -m pip"]),
    # an RTX 5070 in ComfyUI on a cu128 torch, xformers from before it
    ("ComfyUI stopped working after I swapped in an RTX 5070\ntorch 2.8.0+cu128\nxformers 0.0.29.post3\n",
     "attention", ["--disable-xformers"]),
    # SageAttention's SM90 assert on an H100 after a torch upgrade
    ("H100 80GB, upgraded to torch 2.8.0+cu128 last week\n  File \"sageattention/core.py\", line 702, in "
     "sageattn_qk_int8_pv_fp8_cuda_sm90\nAssertionError: SM90 kernel is not available. Make sure you GPUs with "
     "compute capability 9.0.", "abi-mismatch", ["uninstall sageattention", "SM90_ENABLED", "--no-build-isolation"]),
    # SageAttention 2.2 on a cu124 torch, Windows
    ("Windows 10, RTX 4070 SUPER, torch 2.5.1+cu124, sageattention-2.2.0+cu124torch2.5.1.post2 wheel\n"
     "torch.AcceleratorError: CUDA error: unspecified launch failure", "attention", ["12.8", "2.1.1", "cu124"]),
    # SageAttention installed but not importable in ComfyUI portable
    ("ComfyUI_windows_portable, torch 2.7.1+cu128\nI pip installed the sageattention wheel but the log keeps saying "
     "Sage attention is not installed", "attention", ["python_embeded\\python.exe -m pip", "triton-windows<3.4"]),
    # FlashAttention 2 asked by transformers on Windows
    ("Windows 11, Qwen2-VL loaded with from_pretrained(..., attn_implementation=\"flash_attention_2\")\nImportError: "
     "FlashAttention2 has been toggled on, but it cannot be used due to the following error: the package flash_attn "
     "seems to be not installed.", "attention", ["attn_implementation=\"sdpa\"", "cpXY"]),
    # a bf16 video model in fp16 on a card without bf16
    ("my diffusers script for Wan 2.1 on an RTX 2080 Ti: with torch_dtype=torch.float16 the result is completely "
     "black video, no error", "precision", ["fp32", "no bf16"]),
    # the same on a card with bf16
    ("HunyuanVideo in fp16 on an RTX 4080 gives me black frames every time", "precision", ["bf16 instead of fp16"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # NaN latents on a card with working fp16: the VAE's reading, not the GTX 16xx one
    ("kohya_ss on an RTX 3060 12GB\nRuntimeError: NaN detected in latents", "cudnn.benchmark"),
    # torch's own DLL failure is not triton's
    ("import torch\nOSError: [WinError 126] ... DLL load failed while importing _C: The specified module could not be "
     "found.", "vcruntime140_1.dll"),
    # "CUDA is not installed" outside Pinokio
    ("nvcc: CUDA is not installed on this machine", "pinokio\\api"),
    # xformers with a cu121 torch on an Ada card: no Blackwell reading
    ("ComfyUI not working, RTX 4090\ntorch 2.3.1+cu121\nxformers 0.0.26.post1", "the xformers beside"),
    # SageAttention's SM89 kernel asked of an RTX 3090: the card lacks it, no reinstall makes it
    ("RTX 3090\nAssertionError: SM89 kernel is not available. Make sure you GPUs with compute capability 8.9.",
     "uninstall sageattention"),
    # SageAttention 2.2 on a cu128 torch: the CUDA floor is met
    ("torch 2.7.1+cu128, sageattention 2.2.0, RTX 4090\nCUDA error: unspecified launch failure", "2.1.1"),
    # flash-attn toggled on under Linux: no Windows wheel advice
    ("Ubuntu 22.04\nImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following "
     "error: the package flash_attn seems to be not installed.", "community-built Windows"),
    # black pictures from the SDXL VAE in fp16: the VAE's reading
    ("SDXL in fp16 gives black images, the VAE decode produces NaN", "bf16 instead of fp16"),
    # a wheel into an environment that has torch already
    ("pip install flash_attn-2.7.4-cp310-cp310-win_amd64.whl\nRequirement already satisfied: torch in "
     "c:\\comfy\\venv\\lib\\site-packages (2.6.0+cu126)", "cp310 for Python 3.10"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
