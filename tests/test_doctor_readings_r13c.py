"""doctor, round 13 (issue 63): readings for batch 12's missed training cases of ABI mismatches, an arch missing from a
build, and number formats. Each paste is written for its reading (another GPU, tool, version or wording than the mined
case that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the memory-efficient attention kernel in bf16 on a Turing card (a modded 22 GB card named with its memory glued on)
    ("两张2080Ti22G跑 Qwen2-7B-Instruct, transformers 4.41, torch 2.3.1\n  File \"modeling_qwen2.py\", line 640, in forward\n"
     "    attn_output = torch.nn.functional.scaled_dot_product_attention(\nRuntimeError: cutlassF: no kernel found to "
     "launch!", "precision", ["torch_dtype=torch.float16", "RTX 2080 Ti"]),
    # the backward kernel, a V100, LLaMA-Factory: its own dtype setting
    ("llamafactory-cli train qwen_lora.yaml on 4x Tesla V100-SXM2-32GB\nRuntimeError: cutlassB: no kernel found to "
     "launch!", "precision", ["float16", "infer_dtype: float16"]),
    # a SageMaker instance named for its GPU (a g4dn is a T4): the card the kernel lacks
    ("endpoint on ml.g4dn.2xlarge, diffusers 0.27\nRuntimeError: cutlassF: no kernel found to launch!", "precision",
     ["Tesla T4", "torch_dtype=torch.float16 in the pipeline"]),
    # xformers of the same torch release built for another CUDA: the installed torch's own index
    ("python -m xformers.info\nWARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
     "    PyTorch 2.3.0+cu121 with CUDA 1201 (you have 2.3.0+cu118)\n    Python  3.11.9 (you have 3.11.9)",
     "abi-mismatch", ["--index-url https://download.pytorch.org/whl/cu118", "xformers==0.0.26.post1"]),
    # xformers made for a newer torch (pip install xformers fetched the latest): either move torch or pin xformers
    ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n    PyTorch 2.5.1+cu124 "
     "with CUDA 1204 (you have 2.4.1+cu121)\n  Memory-efficient attention, SwiGLU, sparse and more won't be available.",
     "abi-mismatch", ["torch==2.5.1 torchvision==0.20.* torchaudio==2.5.*", "whl/cu124", "xformers==0.0.28.post1"]),
    # a torch upgraded past its xformers, shown without a CUDA tag (PyPI's Linux build of 2.6: CUDA 12.4)
    ("xFormers was built for:\n    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.6.0)\n    Python  3.12.3 (you have "
     "3.12.3)", "abi-mismatch", ["xformers==0.0.29.post3 --index-url https://download.pytorch.org/whl/cu124"]),
    # text-embeddings-inference on an Ampere A10G (a g5 instance) pulling the default (8.0) image
    ("docker run --gpus all ghcr.io/huggingface/text-embeddings-inference:1.2 --model-id BAAI/bge-large-en-v1.5\n"
     "on an AWS g5.xlarge\nError: Could not create backend\nCaused by:\n    Could not start backend: Runtime compute "
     "cap 86 is not compatible with compile time compute cap 80", "arch-missing", ["86-<version> for 8.6"]),
    # NVRTC of CUDA 11.6 asked for a Hopper card's own arch by a torch before the 1.13 cap
    ("H100 PCIe, torch 1.12.1+cu116\n  File \"torch/_jit_internal.py\"\nRuntimeError: nvrtc: error: invalid value for "
     "--gpu-architecture (-arch)", "arch-missing", ["at least torch 1.13", "CUDA 11.8"]),
    # TransformerEngine's old 9.x floor on an Ada data-center card: the release and the CUDA that added Ada's FP8
    ("import transformer_engine.pytorch as te\nwith te.fp8_autocast(enabled=True):\nAssertionError: Device compute "
     "capability 9.x required for FP8 execution.\nGPU: NVIDIA L4", "arch-missing", ["0.7", "12.1"]),
    # the later check naming cuBLAS on Ada (an RTX 4080)
    ("te.fp8_autocast on my RTX 4080 with transformer_engine 1.2\nAssertionError: CublasLt version 12.1.3.x or higher "
     "required for FP8 execution on Ada.", "arch-missing", ["12.1", "transformer_engine"]),
    # a Blackwell card named by the vendor and its number alone: torch's CUDA 12.8 build
    ("trying to run on my nvidia 5080, Windows 11\nRuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "arch-missing", ["cu128"]),
    # LM Studio's ROCm runtime off its target list on Linux (another RDNA4 card): Vulkan meanwhile
    ("LM Studio 0.3.31, Ubuntu 24.04, Radeon RX 9060 XT (gfx1200)\nROCm llama.cpp (Linux) runtime: GPU survey "
     "unsuccessful\nVulkan llama.cpp works", "arch-missing", ["gpu.targets", "Vulkan"]),
    # the same on gfx1201 (an R9700): the runtime release that runs it
    ("LM Studio 0.3.33 on Fedora 43, AMD Radeon AI PRO R9700 (gfx1201)\nROCm llama.cpp: Error surveying hardware",
     "arch-missing", ["2.27.1"]),
]

NEGATIVES = [
    # the same kernel error on an Ampere card: not the format's reading
    ("A100 80GB, torch 2.1\nRuntimeError: cutlassF: no kernel found to launch!", "float16 instead of bfloat16"),
    # ... nor on a p4d instance (A100s)
    ("training on p4d.24xlarge\nRuntimeError: cutlassB: no kernel found to launch!", "float16 instead of bfloat16"),
    # xformers beside a CPU torch: the CUDA torch is what is missing, not xformers' index
    ("xFormers was built for:\n    PyTorch 2.1.0+cu121 with CUDA 1201 (you have 2.1.0+cpu)",
     "install the xformers for the installed torch"),
    # TransformerEngine's 8.9 floor on an Ampere card: FP8 is not there to unlock
    ("te.fp8_autocast on RTX 3090\nAssertionError: Device compute capability 8.9 or higher required for FP8 "
     "execution.", "upgrade TransformerEngine to 0.7"),
    # NVRTC's error on an Ampere card under a torch that already caps it: not the 1.13 cap
    ("RTX 3090, torch 1.13.1+cu117\nnvrtc: error: invalid value for --gpu-architecture (-arch)", "at least torch 1.13"),
    # LM Studio's survey failing on a card its ROCm runtime always carried (gfx1030): another cause
    ("LM Studio 0.3.15, Slackware, Radeon RX 6800 XT (gfx1030)\nROCm llama.cpp (Linux): Error surveying hardware",
     "update the runtime in LM Studio"),
    # a number beside the vendor's name that is no card
    ("NVIDIA 2023 release notes\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "RTX 2023"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
