"""doctor, round 7 (issue 63): readings of the multi-GPU, number-format, memory, attention, hang, visibility and
variable families that carry to pastes doctor has never seen. Each paste is written for its reading (another GPU,
tool or wording than the mined case that asked for it), and the fix must name the family's remedy with the machine's
values; the negatives keep each reading out of pastes it does not fit (a rule's reading only: one by likeness is
marked as such)."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # a multi-GPU run "stuck" in the user's words, "Multi GPU" spelt with a space, consumer cards: peer-to-peer
    ("Multi GPU training stuck at the first step\n- GPU type: NVIDIA GeForce RTX 4090\n- num_processes: 4",
     "multi-gpu-transport", ["NCCL_P2P_DISABLE=1"]),
    # the user says the run only works with P2P off: the platform's ACS / IOMMU is the real fix
    ("DDP training hangs with 8 or more GPUs on our server. It works after export NCCL_P2P_DISABLE=1, is that safe?",
     "multi-gpu-transport", ["ACS", "iommu=pt"]),
    # NCCL's last words are its NVLS setup: NVLink SHARP hangs
    ("torchrun on 8x H200 hangs at init, the last log line on every rank:\n"
     "gpu01:77:90 [2] NCCL INFO NVLS multicast support is available on dev 2\nno output after that",
     "multi-gpu-transport", ["NCCL_NVLS_ENABLE=0"]),
    # nvls.cc's CUDA 'invalid argument': the NVSwitch fabric manager
    ("all_gather_perf -g 4 on an H800 node:\nnode7:5511:5530 [0] transport/nvls.cc:201 NCCL WARN Cuda failure "
     "'invalid argument'\nnode7:5511:5530 [0] NCCL INFO init.cc:1310 -> 1", "driver", ["nvidia-fabricmanager"]),
    # /dev/shm too small in a distributed run's container: the transport family's --shm-size
    ("torchrun --nproc_per_node 4 pretrain.py (in docker)\nRuntimeError: DataLoader worker (pid 311) is killed by "
     "signal: Bus error. It is possible that dataloader's workers are out of shared memory.",
     "multi-gpu-transport", ["--shm-size"]),
    # accelerate's saved multi-GPU config on Windows with one GPU: `accelerate config`, no distributed training
    ("accelerate launch train_dreambooth.py on Windows 10, RTX 3060 12GB\n"
     "RuntimeError: Distributed package doesn't have NCCL built in", "multi-gpu-transport",
     ["accelerate config", "No distributed training"]),
    # precision: NaN in the latents a trainer caches is the VAE in fp16 (kohya's --no_half_vae)
    ("sdxl_train.py --mixed_precision bf16 --cache_latents\nRuntimeError: NaN detected in latents: img_0042.png",
     "precision", ["--no_half_vae"]),
    # bf16 refused by vLLM, in a user's misspelling, on an old card: float16 by vLLM's own --dtype
    ("vllm serve on a Tesla T4 fails: bfloat not supported by this card", "precision", ["--dtype half", "float16"]),
    # bf16 failing in the user's words during fine-tuning: fp16 in the training config
    ("LoRA SFT crashes when using bfloat16 on our old cluster (torch 1.12); how do I turn it off?", "precision",
     ["fp16: true"]),
    # a tool refusing fp16 on a GPU without bf16: fp32 is the format left
    ("full fine-tune on 2x P100: AssertionError: please use bf16 or fp32\n--sft_type full --dtype fp16 (swift)",
     "precision", ["--dtype fp32"]),
    # trl's SFTTrainer on a GPU without bf16: the settings go in SFTConfig
    ("trainer = SFTTrainer(model=model, args=TrainingArguments(bf16=True))\nValueError: Your setup doesn't support "
     "bf16/gpu. You need Ampere+ GPU with cuda>=11.0", "precision", ["SFTConfig", "fp16=True"]),
    # out-of-memory in Chinese words, with a long sequence in the config: that length first
    ("2张4090微调Llama3-8B显存不足\nstage: sft\nfinetuning_type: lora\ncutoff_len: 16384\nper_device_train_batch_size: 1",
     "out-of-memory", ["cutoff_len 16384", "cutoff_len: 8192"]),
    # GRPO out of memory: the rollout engine's own switches (ms-swift's move_model_batches, TRL's vLLM share)
    ("GRPO training of Qwen2.5-7B with LoRA on 8x A800 still runs out of GPU memory with ZeRO-3", "out-of-memory",
     ["move_model_batches", "vllm_gpu_memory_utilization"]),
    # torchtitan's batch lives in its TOML config
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
     "CONFIG_FILE=./torchtitan/models/llama3/train_configs/llama3_70b.toml ./run_train.sh", "out-of-memory",
     ["local_batch_size"]),
    # env-not-applied: an override exported in the shell profile, Ollama started by systemd, the GPU unused (prose)
    ("ollama runs only on the CPU with my RX 6600\nin ~/.profile: export HSA_OVERRIDE_GFX_VERSION=10.3.0\n"
     "Mar 03 09:12:44 host systemd[1]: Started ollama.service - Ollama Service.", "env-not-applied",
     ["HSA_OVERRIDE_GFX_VERSION=10.3.0", "ollama.service"]),
    # visibility: a Vulkan device that is a layer over the CPU (llvmpipe) beside the card: ggml's own variable
    ("ggml_vulkan: Found 2 Vulkan devices:\nggml_vulkan: 0 = llvmpipe (LLVM 17.0.6, 256 bits) (llvmpipe) | uma: 0\n"
     "Vulkan1: AMD Radeon RX 7600 (RADV NAVI33) | uma: 0 | fp16: 1 | warp size: 64\n"
     "Vulkan0: llvmpipe (LLVM 17.0.6, 256 bits) | uma: 1 | fp16: 0", "visibility", ["GGML_VK_VISIBLE_DEVICES=1"]),
    # visibility: HIP's module never loaded on a second device (the Ryzen's iGPU): hide it
    ("RX 7900 GRE, training crashes with AMP on:\n:0:/src/clr/hipamd/src/hip_global.cpp:158 : 998877 us: "
     "Module not initialized", "visibility", ["HIP_VISIBLE_DEVICES=0", "iGPU"]),
    # gpu-hang: the driver evicting compute queues (another APU, another workload)
    ("dmesg while 3 llama.cpp servers share a Radeon 890M (gfx1150):\n"
     "amdgpu: Freeing queue vital buffer 0x7f00deadb000, queue evicted\nthen the desktop freezes", "gpu-hang",
     ["amdgpu.cwsr_enable=0"]),
    # gpu-hang: /dev/kfd opens with EINVAL although the user may open it: the GPU is stuck, reboot
    ("$ rocminfo\nROCk module is loaded\nUnable to open /dev/kfd read-write: Invalid argument\n$ groups\n"
     "alice video render\n(the RX 7800 XT was passed through to a Windows VM before)", "gpu-hang", ["reboot"]),
    # attention: TGI's own kernels missing from a local install
    ("text-generation-launcher --model-id mistralai/Mistral-7B-v0.1 --num-shard 4\nWARN text_generation_launcher: "
     "Could not import Flash Attention enabled models: No module named 'flash_attn_cuda'", "attention",
     ["make install-flash-attention", "make install-vllm"]),
    # attention: flash-attn on a pre-Ampere GPU named in words: off, in the tool's own config key
    ("axolotl on 2x Tesla T4: flash attention does not work on GPUs older than Ampere, where do I turn it off?",
     "attention", ["flash_attention: false", "T4"]),
    ("llamafactory-cli train qwen_lora.yaml fails building flash-attn on my RTX 2080 Ti", "attention",
     ["flash_attn: sdpa", "RTX 2080"]),
    # several Instinct GPUs on an Infinity Fabric bridge, each failing at init: test without the bridge
    ("8x MI250X with the xGMI bridge cards installed, none comes up after the move to the new rack\n"
     "amdgpu 0000:29:00.0: amdgpu: Fatal error during GPU init\n[drm:psp_hw_start [amdgpu]] *ERROR* PSP load kdb failed!",
     "multi-gpu-transport", ["bridge"]),
    # NCCL older than the GPU generation: a newer NCCL, not a transport variable
    ("sendrecv_perf -g 2 on 2x RTX 5080\nNCCL version 2.21.5+cuda12.4\nnode:88:88 [1] NCCL WARN Cuda failure "
     "'unspecified launch failure'", "arch-missing", ["2.26.2"]),
    # ROCm's flash-attention refusing an AMD GPU by its arch check: build it for that arch
    ("RuntimeError: FlashAttention only supports AMD MI200 GPUs or newer.\n(running on an AMD Instinct MI100)",
     "arch-missing", ["gfx908", "GPU_ARCHS=gfx908"]),
    # a serving engine that fails only with tensor parallelism, said in words: its documented first checks
    ("Qwen2-72B-AWQ runs on one A6000 but crashes when I set --tensor-parallel-size 2", "multi-gpu-transport",
     ["--ipc=host", "NCCL_P2P_DISABLE=1"]),
    # the same readings said in Chinese: flash-attn on a pre-Ampere card, bf16 refused
    ("我的显卡是T4，flash-attn装不上，怎么关掉", "attention", ["T4", "sdpa"]),
    ("用llamafactory做DPO训练，bf16报错，显卡不支持bf16", "precision", ["fp16: true"]),
]


# (paste, a phrase the top reading's fix must NOT say): each reading kept out of a paste it does not fit
NEGATIVES = [
    # NVLS named in a working log, with no hang and no CUDA failure: nothing for the NVLS reading
    ("NCCL INFO NVLS multicast support is available on dev 0\nall_reduce_perf finished: Avg bus bandwidth 480 GB/s",
     "NCCL_NVLS_ENABLE=0"),
    # a data loader's shared memory on one GPU, no distributed run: the memory family's reading, not the transport's
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.", "distributed run"),
    # Windows without NCCL on several GPUs: gloo, not "one GPU needs no process group"
    ("accelerate launch --num_processes 2 train.py on Windows 11 with 2x RTX 3090\n"
     "RuntimeError: Distributed package doesn't have NCCL built in", "No distributed training"),
    # fp16 refused on a GPU that has bf16: bf16 is the answer, not fp32
    ("AssertionError: please use bf16 or fp32 (full fine-tuning on an A100 80GB)", "--dtype fp32"),
    # NaN latents from a diffusion sampler's own output (no trainer's check): not the VAE's fp32 flag
    ("the sampler returns black pictures at 512x512", "--no_half_vae"),
    # a short sequence is not named as the cost
    ("CUDA out of memory during LoRA fine-tuning\ncutoff_len: 1024\nper_device_train_batch_size: 16",
     "is the largest cost"),
    # an SFT run (no GRPO) out of memory: no rollout-engine switches
    ("SFT of Qwen2.5-7B with LoRA on 2x A800 runs out of GPU memory", "move_model_batches"),
    # two real Vulkan GPUs: nothing to hide
    ("ggml_vulkan: Found 2 Vulkan devices:\nVulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) | uma: 0\n"
     "Vulkan1: AMD Radeon RX 6800 (RADV NAVI21) | uma: 0\nerror: vk::Device::createComputePipeline: ErrorUnknown",
     "GGML_VK_VISIBLE_DEVICES"),
    # an override exported for a hand-started `ollama serve` (no systemd): not the service reading
    ("export HSA_OVERRIDE_GFX_VERSION=10.3.0\nollama serve\nollama still uses only the CPU", "systemctl edit"),
    # /dev/kfd refused for permission: the groups' reading, not a stuck GPU
    ("Unable to open /dev/kfd read-write: Permission denied\nbob is not member of \"render\" group", "reboot the host"),
    # flash-attn failing to build on an Ampere card: the build reading, not "needs Ampere"
    ("pip install flash-attn fails: error: command '/usr/local/cuda/bin/nvcc' failed (RTX 3090)",
     "needs an Ampere"),
    # a single GPU's init failure with no bridge said: the driver's reading, not the bridge
    ("amdgpu 0000:03:00.0: amdgpu: Fatal error during GPU init\n[drm:psp_hw_start [amdgpu]] *ERROR* PSP create ring "
     "failed!\nRX 7900 XTX", "bridge"),
    # a new NCCL on the same GPU: the transport readings, not "NCCL predates"
    ("all_reduce_perf hangs on 2x RTX 5090\nNCCL version 2.27.3+cuda12.9", "predates"),
    # tensor parallelism that works: nothing to read
    ("vllm serve with --tensor-parallel-size 4 runs fine, how do I raise the throughput?", "--ipc=host"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
