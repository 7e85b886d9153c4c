"""doctor, round 7 (issue 63): readings of the arch families (arch-missing, gpu-unsupported) that carry to pastes never
seen. Every paste here is written for the reading, with another GPU, tool or wording than the mined case it came from:
the kernel driver's own "not supported in kfd", a GCN 1 (GFX6) card by its product name, ZLUDA on a pre-RDNA card,
Triton's compute-capability floor, flash-attn's allow-list, a ptxas older than the GPU, an NCCL older than a Blackwell
arch, a build whose target list lacks the code the runtime loads, a release that lost the GPU, and a CUDA build said to
leave out a compute capability. The negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import time

import pytest

from steadytune.doctor.diagnose import diagnose_text

# (paste, family, phrases the fix must say, confirmed: True / False / None for either)
READINGS = [
    # the KFD refusing the chip outranks the /dev/kfd and group errors it causes
    ("$ rocminfo\nROCk module is loaded\nUnable to open /dev/kfd read-write: No such device\n"
     "$ dmesg | grep kfd\n[    4.101] kfd kfd: amdgpu: TAHITI  not supported in kfd\n",
     "gpu-unsupported", ["not supported", "GFX6"], True),
    # a GCN 1 card by its product name, not detected
    ("[Issue]: rocminfo only shows the CPU\nGPU: AMD Radeon HD 7970\nROCm 6.1.2 on Ubuntu 22.04\n",
     "gpu-unsupported", ["GFX6", "not supported"], None),
    ("ROCm cannot detect my Radeon R9 270X, clinfo lists it fine", "gpu-unsupported", ["GFX6"], None),
    ("Radeon HD 7770 ROCm support?", "gpu-unsupported", ["GFX6", "HD 7770"], None),
    ("FirePro S9150 不支持 ROCm 6 吗", "gpu-unsupported", ["GFX7"], None),
    # an Intel GPU expected to run CUDA / ROCm code: torch's XPU build
    ("Intel Arc B580: torch.cuda.is_available() returns False, how do I train on it?", "gpu-unsupported",
     ["whl/xpu"], None),
    ("RuntimeError: No CUDA GPUs are available\nlaptop with Intel Iris Xe Graphics", "gpu-unsupported", ["xpu"], True),
    # ZLUDA on a card older than RDNA
    ("Trying ZLUDA with ComfyUI on Windows 10, my Radeon R9 Fury X never shows up as a CUDA device",
     "gpu-unsupported", ["RX 5000"], None),
    # Triton's floor names the GPU to move to
    ("torch._inductor.exc.GPUTooOldForTriton: Found NVIDIA GeForce GTX 1080 Ti which is too old to be supported by the "
     "triton GPU compiler, which is used as the backend. Triton only supports devices of CUDA Capability >= 7.0, but "
     "your device is of CUDA capability 6.1", "gpu-unsupported", ["7.0", "T4"], True),
    # TensorFlow's floor, in its own words, with its build switch
    ("2024-03-01 tensorflow/core/common_runtime/gpu/gpu_device.cc:1934] Ignoring visible gpu device (device: 0, name: "
     "Quadro K4000, pci bus id: 0000:02:00.0, compute capability: 3.0) with Cuda compute capability 3.0. The minimum "
     "required Cuda capability is 3.5.", "gpu-unsupported", ["3.5 or newer", "TF_CUDA_COMPUTE_CAPABILITIES=3.0"], True),
    # flash-attn's allow-list, with the card's own arch
    ("RuntimeError: FlashAttention only supports AMD MI200 GPUs or newer.\nrunning on 4x AMD Instinct MI50 32GB",
     "arch-missing", ["gfx906", "GPU_ARCHS=gfx906"], True),
    # a ptxas older than the GPU: Triton's bundled one, or a toolkit's
    ("torch._inductor.exc.InductorError: PTXASError: PTXAS error: Internal Triton PTX codegen error\n"
     "ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'\nGPU: RTX 5080",
     "arch-missing", ["TRITON_PTXAS_PATH", "sm_120"], True),
    ("building my extension with nvcc\nptxas fatal : Value 'sm_100a' is not defined for option 'gpu-name'\n"
     "error: command '/usr/local/cuda-12.4/bin/nvcc' failed with exit code 255",
     "arch-missing", ["CUDA 12.8"], True),
    # an NCCL older than the Blackwell arch
    ("torchrun --nproc_per_node 4 train.py hangs at the first all_reduce\n4x NVIDIA RTX PRO 6000 Blackwell\n"
     "host:77:77 [0] NCCL INFO NCCL version 2.24.3+cuda12.6", "arch-missing", ["2.26.2", "nvidia-nccl-cu12"], True),
    ("8x B200, deepspeed training fails in the first collective\nNCCL version 2.21.5+cuda12.4",
     "arch-missing", ["2.25.1"], True),
    # a build whose target list lacks the code the runtime loads
    ("cmake -B build -DGGML_HIP=ON -DGPU_TARGETS=gfx1100\n./build/bin/llama-cli -m model.gguf -ngl 99\n"
     "ggml_cuda_compute_forward: error: invalid device function\nGPU: Radeon RX 7800 XT",
     "arch-missing", ["gfx1101"], True),
    ("export HSA_OVERRIDE_GFX_VERSION=11.0.0\nmake GGML_HIPBLAS=1 AMDGPU_TARGETS=gfx1102 -j8\n"
     "CUDA error: invalid device function (Radeon RX 7600)", "arch-missing", ["AMDGPU_TARGETS=gfx1100"], True),
    # a release that lost the GPU: the one the user says works
    ("Ollama 0.6.2 no longer uses my Radeon RX 6800 XT after the update, works fine in 0.6.1", "arch-missing",
     ["0.6.1"], False),
    ("LM Studio 0.3.16: my RTX 2060 is not detected anymore after updating, it worked in 0.3.15",
     "arch-missing", ["Runtime", "0.3.15"], False),
    # a title that says a card the wheels lack is unsupported, or hangs: its sibling's code through the override
    ("Is the Radeon RX 6650 XT not supported by ROCm 6.2?", "arch-missing", ["HSA_OVERRIDE_GFX_VERSION=10.3.0"], False),
    ("RX 6750 XT 跑 pytorch 卡住不动", "arch-missing", ["HSA_OVERRIDE_GFX_VERSION=10.3.0"], False),
    ("Radeon Pro W5500: torch hangs at the first matmul", "arch-missing", ["gfx1012"], False),
    # CUDA's message with no vendor named: the NVIDIA reading, not the ROCm one; a GeForce generation said in Chinese
    ("4090 跑 stable diffusion 报错 no kernel image is available for execution on the device", "arch-missing",
     ["compute_cap", "download.pytorch.org/whl/cu"], False),
    ("50系显卡 装的 torch 2.4.1+cu121 用不了 GPU，报错", "arch-missing", ["whl/cu128"], None),
    # a torch's own arch list without the GPU
    ("python -c 'import torch; print(torch.cuda.get_arch_list())'\n['sm_50', 'sm_60', 'sm_70', 'sm_75', 'sm_80', "
     "'sm_86', 'sm_90']\nGPU: NVIDIA GeForce RTX 5070", "arch-missing", ["whl/cu128"], True),
    # Ollama's CUDA floor, said at INFO level
    ("level=INFO source=gpu.go:290 msg=\"CUDA GPU is too old. Compute Capability detected: 3.7\"\nTesla K80, "
     "ollama uses the CPU", "gpu-unsupported", ["CMAKE_CUDA_ARCHITECTURES=37"], True),
    # an app with a bundled ROCm older than a card the wheels carry: the app's newer build
    ("ollama 0.5.1 with Radeon AI PRO R9700: no compatible amdgpu devices detected", "arch-missing",
     ["update Ollama", "gfx1201"], False),
    # a run-time compiler's toolkit newer than the driver: the driver, not a missing arch
    ("tensorflow 2.11 on a Tesla T4\nNVIDIA driver version: 450.80\nCUDA 11.2 toolkit installed\n"
     "InternalError: no kernel image is available for execution on the device", "driver", ["460", "driver"], True),
    # "no kernel image" said in a sentence, and a library refusing a gfx target by name
    ("Quadro M6000 with torch 2.9.0+cu129: no kernel image", "arch-missing", ["whl/cu126"], True),
    ("sglang on MI100: ValueError: gfx908 is not supported by this kernel", "arch-missing", ["gfx908"], True),
    # a Jetson board under a pytorch.org wheel: NVIDIA's JetPack build
    ("Jetson AGX Xavier, installed torch with pip: RuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "arch-missing", ["JetPack"], True),
    # a Kepler card torch cannot see, said in words
    ("GeForce GTX 770: torch.cuda.is_available() is False with torch 2.4", "gpu-unsupported", ["sm_30"], None),
    # an override written with spaces around '=': the shell set nothing
    ("export HSA_OVERRIDE_GFX_VERSION = 11.0.0\npython app.py\nRX 7700 XT: hipErrorNoBinaryForGpu", "override-wrong",
     ["export HSA_OVERRIDE_GFX_VERSION=11.0.0"], True),
    ("koboldcpp 1.82: my GTX 1650 is not used anymore, last working version 1.81", "arch-missing", ["1.81"], False),
    ("after updating ollama to 0.7.1 the Radeon RX 7600 is no longer detected; 0.7.0 works", "arch-missing",
     ["0.7.0", "0.7.1"], False),
    # a title asking a tool that builds its own GPU code for a GPU: that tool's build for the arch
    ("[Feature request] gfx1201 support in flash-attention", "arch-missing", ["GPU_ARCHS=gfx1201"], False),
    ("whisper.cpp not working on RX 7600, please help", "arch-missing", ["AMDGPU_TARGETS=gfx1102"], False),
    ("Does SGLang support the RTX 5080?", "arch-missing", ["12.0"], False),
    # a CUDA build said to leave out a compute capability
    ("llama-cpp-python is incompatible with GPUs of compute capability 6.1 (GTX 1060), please build it for Pascal",
     "arch-missing", ["6.1", "CMAKE_CUDA_ARCHITECTURES=61"], False),
]


@pytest.mark.parametrize("paste,family,phrases,confirmed", READINGS, ids=[r[0][:48] for r in READINGS])
def test_a_reading_names_the_family_and_its_fix(paste, family, phrases, confirmed):
    top = diagnose_text(paste).top
    assert top is not None, paste
    assert top.family == family, (top.family, top.title, top.fix)
    missing = [p for p in phrases if p.lower() not in top.fix.lower()]
    assert not missing, (missing, top.fix)
    if confirmed is not None:
        assert top.confirmed is confirmed, top.title


# pastes each reading must stay out of: (paste, what the top diagnosis must not be: (family, a phrase of its fix))
NEGATIVES = [
    # a supported GPU refused by the groups: the group fix, not "outside ROCm"
    ("rocminfo: Unable to open /dev/kfd read-write: Permission denied\nuser is not in the render group\n"
     "GPU: Radeon RX 7900 XTX", ("gpu-unsupported", "")),
    # an arch list that carries the GPU
    ("torch.cuda.get_arch_list(): ['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120']\nRTX 5090 works but slow",
     ("arch-missing", "arch list")),
    # prose that writes the override with spaces is not a shell line
    ("I tried HSA_OVERRIDE_GFX_VERSION=10.3.0 on my RX 6600, it works now.\nHSA_OVERRIDE_GFX_VERSION = 10.3.0 is what "
     "the wiki says", ("override-wrong", "without spaces")),
    # a driver as new as the toolkit: not the driver
    ("import jax\njax.numpy.ones(3)\nRuntimeError: no kernel image is available for execution on the device\n"
     "driver version 535.104, CUDA 12.2", ("driver", "")),
    # a compiler that cannot find its device libraries while building ROCm is not code missing for the card
    ("building rocBLAS for my Radeon VII from source: clang cannot find the ROCm device library path, build stuck",
     ("arch-missing", "")),
    # a question about a model on the GPU is not about the GPU's arch
    ("Does llama.cpp support Qwen3 on my RTX 4090?", ("arch-missing", "")),
    # a supported card's support question is not "outside ROCm"
    ("Radeon RX 6800 ROCm support?", ("gpu-unsupported", "")),
    # a laptop's Intel iGPU beside an NVIDIA card is not the GPU in question
    ("laptop with Intel UHD Graphics 630 and RTX 3060: torch.cuda.is_available() returns False", ("gpu-unsupported",
                                                                                                 "xpu")),
    # ZLUDA on an RDNA card is not refused by the ZLUDA reading
    ("ZLUDA with ComfyUI on Windows 11, Radeon RX 6700 XT: rocBLAS error: Cannot read TensileLibrary.dat for GPU "
     "arch : gfx1031", ("gpu-unsupported", "ZLUDA")),
    # Vega runs ZLUDA with patched ROCm libraries: not below its floor
    ("SD.Next with ZLUDA on Windows, Radeon RX Vega 64 and patched ROCm libraries: Failed to load ZLUDA: Could not find "
     "module 'C:\\sdnext\\.zluda\\nvcuda.dll'", ("gpu-unsupported", "ZLUDA")),
    # flash-attn's NVIDIA floor names no AMD arch
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.\nGPU: RTX 2080 Ti", ("arch-missing", "gfx")),
    # an NCCL that already carries the arch
    ("2x RTX 5090, vllm tensor_parallel_size=2 hangs\nNCCL version 2.27.3+cuda12.9", ("arch-missing", "NCCL")),
    # a torch whose wheels pull in a new enough NCCL, or P2P off that mended it: not NCCL's age
    ("2x RTX 5090 with torch 2.8.0+cu128: NCCL all_reduce hangs in my training", ("arch-missing", "NCCL")),
    ("4x RTX 5090, NCCL hang in vllm tensor parallel; NCCL_P2P_DISABLE=1 fixed it", ("arch-missing", "NCCL")),
    # one GPU and an old NCCL, no trouble said: nothing to read
    ("RTX 5090 fine-tuning works\nNCCL version 2.21.5+cuda12.4", ("arch-missing", "NCCL")),
    # a target list that carries the runtime's target
    ("export HSA_OVERRIDE_GFX_VERSION=10.3.0\nmake LLAMA_HIPBLAS=1 AMDGPU_TARGETS=gfx1030\n"
     "CUDA error: invalid device function", ("arch-missing", "does not include")),
    # a release compared for speed, with no GPU lost
    ("Ollama 0.6.2 is much slower than 0.6.1 on my RX 6800 XT, works fine in 0.6.1 though", ("arch-missing", "0.6.1")),
    # a hang on a card the wheels carry is not its missing code
    ("RX 7900 XTX hangs during training with torch 2.7.1+rocm6.3", ("arch-missing", "HSA_OVERRIDE_GFX_VERSION")),
    # a current card torch cannot see is not below every build
    ("RTX 3060: torch.cuda.is_available() returns False", ("gpu-unsupported", "")),
    ("PyTorch dropped support for compute capability 3.5 in 1.13, my K40 is not detected", ("arch-missing",
                                                                                            "CMAKE_CUDA")),
    # a stated floor is the GPU's limit, not a build that left it out
    ("vLLM requires compute capability 7.0 or newer; my P40 is not supported", ("arch-missing", "CMAKE_CUDA")),
]


@pytest.mark.parametrize("paste,wrong", NEGATIVES, ids=[n[0][:48] for n in NEGATIVES])
def test_a_reading_stays_out_of_pastes_it_does_not_fit(paste, wrong):
    top = diagnose_text(paste).top
    family, phrase = wrong
    if top is not None and top.family == family:
        assert phrase and phrase.lower() not in top.fix.lower() + top.title.lower(), (top.title, top.fix)


# hostile lines for this round's patterns (a release token, a target list, an arch list, an Intel name): each stays
# linear (the release pattern took 111 s on the first line before its repeats were bounded)
HOSTILE = ["works with " + "1.1." * 20000, "x 1.1." * 20000 + " gives the error", "last working version " + "a" * 60000,
           "AMDGPU_TARGETS=" + "gfx1030;" * 10000 + "\ninvalid device function", "get_arch_list " + "sm_80 " * 20000,
           "Intel Arc A770 " + "? " * 30000 + " cuda", "NCCL " + "two GPUs " * 5000 + "RTX 5090"]


@pytest.mark.parametrize("paste", HOSTILE, ids=[h[:24] for h in HOSTILE])
def test_hostile_lines_stay_fast(paste):
    start = time.perf_counter()
    diagnose_text(paste)
    assert time.perf_counter() - start < 10
