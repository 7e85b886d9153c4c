"""doctor, round 9 (issue 63): readings of the several-GPU, WSL, memory and MIOpen families. Each paste is written for
its reading (another GPU, tool or wording than the mined case that asked for it); the negatives keep each reading out
of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # NCCL's SHM transport with cuMem host buffers on cards without peer access (T4s under torchrun, not L4s in vLLM)
    ("torchrun --nproc_per_node 2 train.py on 2x Tesla T4\nNCCL version 2.24.3+cuda12.4\nnode1:311:340 [1] "
     "transport/shm.cc:480 NCCL WARN Cuda failure 217 'peer access is not supported between these two devices'",
     "multi-gpu-transport", ["NCCL_CUMEM_HOST_ENABLE=0"]),
    # the libibverbs warning and then silence, in a torchrun DDP run on two RTX A5000s (not Lightning, not A6000)
    ("python -m torch.distributed.run --nproc_per_node 2 train_ddp.py on 2x RTX A5000, nothing after this:\n"
     "host:7712:7760 [0] NCCL WARN Failed to open libibverbs.so[.1]\nAll distributed processes registered. Starting "
     "with 2 processes", "multi-gpu-transport", ["IOMMU", "NCCL_P2P_DISABLE=1"]),
    # works on one GPU, fails on two, said in words (a HF generate with device_map, not vLLM)
    ("Qwen2-72B with device_map=auto fails on 2 GPUs, but the 7B works fine on a single GPU", "multi-gpu-transport",
     ["NCCL_P2P_DISABLE=1"]),
    # ROCm 7.2 under WSL with rocminfo's hsa_init failure, an RX 7900 XTX (not an R9700, not unsloth's installer)
    ("WSL2 Ubuntu 22.04, ROCm 7.2.0, RX 7900 XTX\n$ rocminfo\nWSL environment detected.\nhsa_init Failed, possibly no "
     "supported GPU devices", "wsl", ["HSA_ENABLE_DXG_DETECTION=1"]),
    # an RX 9070 XT under WSL not seen by torch (not the RX 9070, not rocminfo)
    ("WSL 2 on Windows 11 with an RX 9070 XT: torch.cuda.is_available() returns False, the GPU is not detected",
     "wsl", ["Adrenalin", "25.6.1"]),
    # vLLM's unpinned-memory warning under WSL, asked as a throughput question
    ("vllm serve mistral-7b under WSL2 is about half as fast as on my Linux box\nWARNING 03-02 11:20:41 "
     "worker.py:118] Using 'pin_memory=False' as WSL is detected. This may slow down the performance.",
     "wsl", ["pinned", "native Linux"]),
    # a Vulkan program inside WSL (llama.cpp's Vulkan build, not mlc-llm)
    ("Ubuntu 24.04 in WSL2, llama.cpp built with -DGGML_VULKAN=ON\n./llama-cli -m q4.gguf\nggml_vulkan: "
     "vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER", "wsl", ["natively on Windows"]),
    # memory that grows until OOM in LLaMA-Factory, said in English with a progress bar
    ("llamafactory-cli train qwen2_lora.yaml: GPU memory keeps increasing during training until\n"
     " 35%|███▌      | 410/1170 [21:08<39:10,  3.09s/it]\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 3.20 GiB", "out-of-memory", ["cutoff_len"]),
    # a kernel package's build killed for RAM (xformers, not flash-attn)
    ("pip install -v xformers --no-build-isolation on a 32 GB box with 24 cores\n[112/180] nvcc ... "
     "fmha/kernels/cutlassF_bf16_aligned.cu\nKilled", "out-of-memory", ["MAX_JOBS", "xformers"]),
    # vLLM's Python API out of memory, the error line naming torch: the server's knobs, its sequence count among them
    ("from vllm import LLM\nllm = LLM(model='Qwen2.5-7B-Instruct')\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.64 GiB of which 5.06 MiB is free.",
     "out-of-memory", ["--max-num-seqs", "--gpu-memory-utilization"]),
    # a tiny request on a GPU with nothing free, no training: memory reserved up front (an SGLang-style server log)
    ("python -m sglang.launch_server --model-path Llama-3.1-8B-Instruct --port 30000\ntorch.OutOfMemoryError: CUDA "
     "out of memory. Tried to allocate 8.00 MiB. GPU 3 has a total capacity of 79.19 GiB of which 1.94 MiB is free.",
     "out-of-memory", ["other processes", "--mem-fraction-static"]),
    # a known-broken Insider build said as "Windows build: NNNNN", CUDA failing in WSL (another build, another tool)
    ("Windows build: 21354.1\n$ python -c 'import torch; torch.zeros(1).cuda()'\nRuntimeError: CUDA error: all "
     "CUDA-capable devices are busy or unavailable", "wsl", ["the Insider build after 21354"]),
    # MIOpen's perf-db warning for another arch and CU count (a gfx900 with 56 CUs)
    ("MIOpen(HIP): Warning [FindRecordUnsafe] File is unreadable: /opt/rocm/share/miopen/db/gfx900_56.cd.pdb.txt",
     "miopen-kernel", ["gfx900_64.cd.pdb.txt", "gfx900_56.cd.pdb.txt"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # peer access refused by vLLM's own all-reduce, no SHM transport named: vLLM's switch, not NCCL's cuMem
    ("vllm serve llama-3-8b --tensor-parallel-size 2 on 2x RTX 4090\ncustom_all_reduce.py: RuntimeError: peer "
     "access is not supported between these two devices", "NCCL_CUMEM_HOST_ENABLE"),
    # the libibverbs warning in a run that then fails with its own error: not the silent-hang reading
    ("torchrun --nproc_per_node 2 train.py\nNCCL WARN Failed to open libibverbs.so[.1]\nRuntimeError: NCCL error: "
     "unhandled system error, NCCL version 2.18.1", "the libibverbs warning is harmless"),
    # one GPU only, said to work: nothing to read about several
    ("the 7B model works fine on a single GPU and is fast", "NCCL_P2P_DISABLE"),
    # ROCm 6.x under WSL: the WSL release's runtime, not ROCm 7's detection switch
    ("WSL2 Ubuntu 22.04, ROCm 6.1.3, RX 7900 XTX\n$ rocminfo\nWSL environment detected.\nhsa_init Failed",
     "HSA_ENABLE_DXG_DETECTION"),
    # an RX 9070 on native Linux: no Windows driver to name
    ("Ubuntu 24.04 with an RX 9070 XT: rocminfo does not detect the GPU", "Adrenalin Edition 25.6.1"),
    # a Vulkan error on native Linux: not WSL's
    ("Arch Linux, llama.cpp Vulkan build: vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER",
     "natively on Windows"),
    # an OOM at the very first step: no growth to read
    ("llamafactory-cli train sft.yaml\n  0%|          | 0/1170 [00:00<?, ?it/s]\ntorch.OutOfMemoryError: CUDA out of "
     "memory. Tried to allocate 3.20 GiB", "memory grows"),
    # a flash-attn build that stops on a compiler error: not the RAM reading
    ("pip install flash-attn --no-build-isolation\ncsrc/flash_attn/flash_api.cpp:12: fatal error: cuda_runtime.h: "
     "No such file or directory\nninja: build stopped: subcommand failed.", "MAX_JOBS"),
    # a TRL training run that also uses vLLM for generation: the training's knobs, not the server's
    ("trl sft with use_vllm on one A100, per_device_train_batch_size 8, vllm 0.8.5 installed\ntorch.OutOfMemoryError: "
     "CUDA out of memory. Tried to allocate 4.00 GiB", "--max-num-seqs"),
    # a vLLM server killed while torch.compile runs: no source build, no MAX_JOBS
    ("vllm serve Qwen2.5-7B-Instruct\nINFO backends.py:415] Compiling a graph for dynamic shape takes 21.4 s\nKilled",
     "MAX_JOBS"),
    # DeepSpeed's ops built by ninja at run time, then the training killed: no package build to limit
    ("deepspeed train.py --deepspeed ds_z2.json\nninja: no work to do.\nLoading extension module fused_adam...\n"
     "Killed", "MAX_JOBS"),
    # vLLM's custom all-reduce refused peer access beside NCCL's SHM channels: vLLM's switch, not NCCL's cuMem
    ("vllm serve llama-3-8b -tp 2 on 2x RTX 3090\nNCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
     "custom_all_reduce.cuh:307 'peer access is not supported between these two devices'", "NCCL_CUMEM_HOST_ENABLE"),
    # a tiny request failing in a training run: the training's reading, not the up-front reservation
    ("accelerate launch sft.py (LoRA, per_device_train_batch_size 4)\ntorch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 8.00 MiB. GPU 0 has a total capacity of 23.64 GiB of which 1.94 MiB is free.",
     "--mem-fraction-static"),
    # torch says this process's own tensors hold the GPU: not memory reserved by something else
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity of 11.72 GiB "
     "of which 2.19 MiB is free. Of the allocated memory 11.2 GiB is allocated by PyTorch, and 40.1 MiB is reserved by "
     "PyTorch but unallocated.", "--mem-fraction-static"),
    # a released Windows build: no preview to update from
    ("Windows build: 22631.4037\nRuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
     "Insider build after"),
    # MIOpen's kernel database missing (a .kdb): not the perf-db copy
    ("MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1030_40.kdb Performance may degrade",
     "sudo cp"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
