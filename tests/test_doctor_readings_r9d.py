"""doctor, round 9 (issue 63): readings of the visibility, driver, override-wrong and device-access families for
pastes from Ollama's scheduler and GPU choice, accelerate, Ray, LM Studio, unsloth and torchtitan, and the drivers
under ZLUDA, vLLM and SGLang. Each paste is written for its reading (another GPU, tool or wording than the mined case
that asked for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # two ranks on one GPU in a hand-written FSDP script (not torchtitan): bind each rank before the mesh
    ("torchrun --nproc_per_node 4 my_fsdp.py\n[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device "
     "1a000", "visibility", ["torch.cuda.set_device"]),
    # a HIP function missing from the driver's amdhip64.dll, told in words (ComfyUI-Zluda, another function)
    ("ComfyUI-Zluda won't start: hipGraphExecDestroy entry point not found in amdhip64_6.dll", "driver",
     ["update the AMD driver"]),
    # a CUDA driver API function missing at import (another tool, vLLM, another green-context call, driver 530;
    # read by rules/install/cuda_libraries.py, kept here as a paraphrase of the SGLang case)
    ("vllm serve Qwen2.5-7B\nImportError: /usr/lib/python3/dist-packages/vllm/_C.abi3.so: undefined symbol: "
     "cuGreenCtxCreate\nDriver Version: 530.30.02", "driver", ["NVIDIA driver", "550"]),
    # WinError 1314 from another package's build that symlinks (read by access/device_files.py; a paraphrase of the
    # xformers case)
    ("pip install -e . (sentencepiece fork) on Windows 10\nos.symlink(src, dst)\nOSError: [WinError 1314] A required "
     "privilege is not held by the client: 'third_party\\\\x' -> 'pkg\\\\x'", "device-access", ["Developer Mode"]),
    # Ollama on three cards (A6000s), a model kept on one: the scheduler's spread switch
    ("Ollama on a server with three RTX A6000 cards: the 32B model only uses one GPU, the other two sit idle",
     "visibility", ["OLLAMA_SCHED_SPREAD=1"]),
    # ollama ps splitting onto the CPU on 2x 4090 (numbers, no prose about utilisation)
    ("2x RTX 4090 with ollama 0.5.7\nollama ps\nllama3.3:70b   a6eb4748fd29    48 GB    21%/79% CPU/GPU    4 minutes "
     "from now", "visibility", ["OLLAMA_SCHED_SPREAD"]),
    # CUDA_VISIBLE_DEVICES for Ollama ignored (another wording, A100s): the server's variable, by UUID, Vulkan off
    ("ollama 0.31 on 4x A100: I put CUDA_VISIBLE_DEVICES=2,3 in the unit file but it is ignored, the model still "
     "lands on GPU 0", "visibility", ["UUID", "OLLAMA_VULKAN=0", "nvidia-smi -L"]),
    # a question which GPUs a launch uses (torchrun, 4 of 8 busy): the visibility variable on the launch
    ("We share a node with 8 GPUs; 4 are busy. How can I choose which GPUs torchrun uses?", "visibility",
     ["CUDA_VISIBLE_DEVICES="]),
    # Ray workers with no GPU (Ray Tune this time): the num_gpus request
    ("ray.init() on a machine with an RTX 3090\ntune.run(train_fn) - inside the trial torch.cuda.is_available() is "
     "False and ray.get_gpu_ids() returns []", "visibility", ["num_gpus"]),
    # ROCm, two MI100s, the second chosen by HIP_VISIBLE_DEVICES=1 and none found: ROCR's layer
    ("2x MI100, ROCm 6.3, torch 2.5.1+rocm6.2\nHIP_VISIBLE_DEVICES=1 python finetune.py\nRuntimeError: No HIP GPUs "
     "are available", "visibility", ["ROCR_VISIBLE_DEVICES"]),
    # rocminfo listing an iGPU and a card of another generation both as the card's target: an override in force
    ("rocminfo on a Ryzen AI 9 HX 370 laptop with a Radeon RX 9070 XT in an eGPU dock:\n  Marketing Name:          "
     "AMD Radeon RX 9070 XT\n  Name:                    gfx1201\n  Marketing Name:          AMD Radeon 890M "
     "Graphics\n  Name:                    gfx1201", "override-wrong", ["unset HSA_OVERRIDE_GFX_VERSION"]),
    # a driver whose CUDA is below 11.8 under a failing install of the stack (flash-attn, a P100, no root)
    ("Tesla P100 server, nvidia-smi shows CUDA Version: 11.2 and I cannot update the driver; pip install flash-attn "
     "fails to build", "driver", ["update the NVIDIA driver", "cuda-compat"]),
    # Ollama on Linux and an RTX 3060 idle while the log says it offloaded: the UVM module Ollama's docs name
    ("ollama serve on Ubuntu 24.04 with an RTX 3060: the log says offloaded 33/33 layers to GPU but nvidia-smi shows "
     "no usage and answers are slow", "driver", ["sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm"]),
    # Ollama (the AMD fork) on Windows, the server's HIP runtime older than the ROCm libraries dropped in: the driver
    ("ollama-for-amd on Windows 11, Radeon 780M; replaced the rocblas files with the ROCm 6.3 build for gfx1103\n"
     'msg="inference compute" id=0 library=rocm compute=gfx1103 driver=6.2 name="AMD Radeon 780M Graphics"\n'
     "Error: llama runner process has terminated: exit status 0xc0000005", "driver", ["update the AMD driver"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a cuBLAS symbol (the toolkit's library, not the driver's API): not the driver reading
    ("ImportError: libtorch_cuda.so: undefined symbol: cublasLtGetStatusString, version libcublasLt.so.12",
     "update the NVIDIA driver"),
    # a permission error on Linux (no WinError 1314): not the Windows privilege reading
    ("PermissionError: [Errno 13] Permission denied: '/usr/local/lib/python3.10/site-packages/x'", "Developer Mode"),
    # Ollama on one GPU split between CPU and GPU (the model is bigger than the card): not the spread switch
    ("ollama ps shows 35%/65% CPU/GPU for llama3.1:70b on my RTX 4070", "OLLAMA_SCHED_SPREAD"),
    # Ollama on one GPU, nothing about which GPUs: not the visibility reading
    ("ollama run llama3 always answers slowly on my RTX 3060", "OLLAMA_VULKAN"),
    # a question how to use the GPU at all (not which ones): not the launch's visibility variable
    ("How can I use the GPU in a docker container with PyTorch?", "--gpu_ids"),
    # Ray with GPUs seen in the task: no request to add
    ("ray.init(); @ray.remote(num_gpus=1) def f(): return ray.get_gpu_ids()  # prints [0], works fine",
     "num_gpus in the RLlib"),
    # ROCm on one GPU with index 0 and no GPU found: not the layers reading
    ("RX 7900 XTX, HIP_VISIBLE_DEVICES=0 python train.py\nRuntimeError: No HIP GPUs are available",
     "choose the GPU in one layer only"),
    # one agent, its own target (the 890M alone): no override to read
    ("rocminfo\n  Marketing Name:          AMD Radeon 890M Graphics\n  Name:                    gfx1150",
     "unset HSA_OVERRIDE_GFX_VERSION"),
    # an old driver under a stack that installed and runs (torch 1.12 +cu113 on CUDA 11.4): not the driver's age
    ("nvidia-smi: CUDA Version: 11.4\ntorch 1.12.1+cu113, fine-tuning in fp16 on a V100 gives loss nan",
     "520 or newer runs CUDA 11.8"),
    # Ollama on Windows using the CPU: no nvidia_uvm there
    ("ollama on Windows 11 with an RTX 4070 runs on the CPU only", "nvidia_uvm"),
    # Ollama on Linux after the user already reloaded nvidia_uvm: not the same advice again
    ("ollama on Ubuntu with an RTX 3090 still runs on the CPU even after sudo rmmod nvidia_uvm && sudo modprobe "
     "nvidia_uvm", "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or reboot)"),
    # the server's HIP runtime as new as the libraries: not the driver's age
    ("ollama-for-amd on Windows 11 with ROCm 6.2 libraries for gfx1150\n"
     'msg="inference compute" id=0 library=rocm compute=gfx1150 driver=6.2 name="AMD Radeon 890M Graphics"\n'
     "Error: llama runner process has terminated: exit status 2", "its HIP runtime at least"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
