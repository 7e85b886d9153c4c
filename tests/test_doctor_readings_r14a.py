"""doctor, round 14 (issue 63): readings for image-generation and audio apps: an AMD GPU's attention failing under
ZLUDA or ROCm (the app's own attention switch), SageAttention older than what patches it in, the torch in an app's own
Python (or the CUDA index its install names), and half precision on GTX 16xx cards in the apps with a switch of their
own. Each paste is written for its reading (another GPU, app, version or wording than the mined case that asked for
it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # ComfyUI-Zluda on an RX 6700 XT, the cuDNN planner's refusal: ComfyUI's quad attention
    ("Windows 11, RX 6700 XT, ComfyUI-Zluda (latest), KSampler fails right away:\nRuntimeError: cuDNN Frontend error: "
     "[cudnn_frontend] Error: No execution plans support the graph.", "attention",
     ["--use-quad-cross-attention", "cudnn"]),
    # the web UI's ZLUDA fork, a cuDNN status code: the web UI's sub-quadratic attention
    ("stable-diffusion-webui-amdgpu started with --use-zluda on my RX 7600\nRuntimeError: cuDNN error: "
     "CUDNN_STATUS_INTERNAL_ERROR", "attention", ["--opt-sub-quad-attention"]),
    # ROCm on Linux, a GPU fault inside ComfyUI's PyTorch attention: the quad attention
    ("ComfyUI on Ubuntu 24.04, ROCm 6.2, Radeon RX 6800\n  File \"/home/u/ComfyUI/comfy/ldm/modules/attention.py\", "
     "line 412, in attention_pytorch\n    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
     "Memory access fault by GPU node-1 (Agent handle: 0x5581) on address 0x7f1c. Reason: Page not present or "
     "supervisor privilege.", "attention", ["--use-quad-cross-attention"]),
    # SageAttention 1.x missing 2.x's kernels, ComfyUI portable on Windows, torch 2.7: triton-windows and the wheel
    ("D:\\ComfyUI_windows_portable\\python_embeded\\python.exe, torch 2.7.1+cu128, RTX 5090\nImportError: cannot import "
     "name 'sageattn_qk_int8_pv_fp8_cuda' from 'sageattention'", "attention",
     ["2.2.0", "triton-windows<3.4", "python_embeded\\python.exe -m pip"]),
    # the release said beside a failing patch on Linux: the source build of 2.x
    ("pip show sageattention -> Version: 1.0.6 (sageattention==1.0.6)\nRTX 4090, Ubuntu 22.04\n"
     "Patch Sage Attention KJ: sageattention is not new enough version, cannot apply the patch", "attention",
     ["2.2.0", "thu-ml/SageAttention"]),
    # a launcher's own venv holding a CUDA torch on an AMD GPU (Stability Matrix on Linux)
    ("Stability Matrix on Fedora 40, Radeon RX 7900 XTX, ComfyUI package\nRuntimeError: Found no NVIDIA driver on "
     "your system. Please check that you have an NVIDIA GPU and installed a driver", "torch-build",
     ["Data/Packages/<package>/venv/bin/python -m pip", "whl/rocm"]),
    # torch outside the web UI sees the NVIDIA card, the web UI does not: its venv, its TORCH_COMMAND
    ("python3 -c 'import torch; print(torch.cuda.is_available())' gives True in my shell, RTX 3060 12GB, Linux Mint\n"
     "but stable-diffusion-webui (./webui.sh) can't detect my GPU and generates on the CPU", "torch-build",
     ["venv/bin/python -m pip", "whl/cu", "TORCH_COMMAND"]),
    # a CPU torch in an app whose README names a CUDA index (IC-Light, Windows)
    ("IC-Light on Windows 10, RTX 4070\npip install -r requirements.txt\npython gradio_demo.py\n"
     "AssertionError: Torch not compiled with CUDA enabled", "torch-build", ["whl/cu121"]),
    # the same on a Blackwell card (FramePack): the CUDA 12.8 index, not the README's older one
    ("FramePack, RTX 5080, torch 2.6.0+cpu\nAssertionError: Torch not compiled with CUDA enabled", "torch-build",
     ["whl/cu128"]),
    # ComfyUI's portable package on Windows with PyPI's CPU torch: its embedded Python, the driver's CUDA index
    ("E:\\AI\\ComfyUI_windows_portable>.\\python_embeded\\python.exe -s ComfyUI\\main.py\nRTX 3080, NVIDIA-SMI "
     "560.94  CUDA Version: 12.6\nAssertionError: Torch not compiled with CUDA enabled", "torch-build",
     ["python_embeded\\python.exe -m pip install torch", "whl/cu126"]),
    # GTX 16xx half precision in the upscaler GUIs and scripts: their own FP16 switch
    ("chaiNNer 0.24, GeForce GTX 1650 SUPER: every upscale with a 4x ESRGAN model gives a completely black result",
     "precision", ["FP16 mode off", "chaiNNer"]),
    ("python inference_realesrgan.py -n RealESRGAN_x4plus -i inputs\nGTX 1660: the outputs are all black",
     "precision", ["--fp32"]),
    ("GFPGAN v1.4 on a GTX 1650 4GB: the restored faces come out as black faces, the rest of the image is fine",
     "precision", ["cudnn.benchmark"]),
    ("Fooocus 2.5, GTX 1660 Ti 6GB: pictures are all black after the last step", "precision", ["--all-in-fp32"]),
    # black past a size on a GTX 16xx: fp16 on that card, not the attention kernel
    ("ComfyUI: upscaling to 2048x2048 gives black images while 512x512 works, GTX 1660 SUPER", "precision",
     ["--force-fp32"]),
]

# (paste, a phrase no reading of it may say)
NEGATIVES = [
    # a cuDNN failure on an NVIDIA card, no ZLUDA: not the AMD attention switch
    ("ComfyUI, RTX 3090, CUDA 12.4\nRuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "--use-quad-cross-attention"),
    # ZLUDA missing a DLL: not the attention switch
    ("ComfyUI-Zluda on RX 6600\nOSError: [WinError 126] The specified module could not be found. Error loading "
     "\"zluda\\nvcuda.dll\"", "--use-quad-cross-attention"),
    # a ROCm fault on a missing kernel: the arch readings', not the attention switch
    ("ComfyUI ROCm RX 5500 XT\n  File \"comfy/ldm/modules/attention.py\", in attention_pytorch\nHIP error: invalid "
     "device function\nMemory access fault by GPU node-1", "--use-quad-cross-attention"),
    # SageAttention 2.2.0 installed and running out of memory: not an upgrade of it
    ("sageattention 2.2.0, RTX 4090, ComfyUI --use-sage-attention\ntorch.OutOfMemoryError: CUDA out of memory. Tried "
     "to allocate 2.00 GiB", "SageAttention 2.2.0 into"),
    # SwarmUI on NVIDIA running out of memory: not its own Python's torch
    ("SwarmUI, RTX 4060 8GB\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB", "own Python"),
    # Paints-UNDO out of memory with a CUDA torch: not the CUDA index
    ("Paints-UNDO, torch 2.3.0+cu121, RTX 3060\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB",
     "whl/cu121"),
    # the app's own log shows a ROCm torch: the build is right, not a reinstall into its Python
    ("ComfyUI on Ubuntu, RX 7900 XTX\npytorch version: 2.5.1+rocm6.2\nComfyUI doesn't detect my AMD GPU, it renders "
     "on the CPU", "own Python"),
    # an RTX card with black upscales: not the GTX 16xx FP16 switch
    ("chaiNNer, RTX 3060: upscaled images come out completely black", "FP16 mode off"),
    # conda-forge is no Forge
    ("conda install -c conda-forge pytorch, GTX 1660 Ti, my script's images are all black", "--all-in-fp32"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
