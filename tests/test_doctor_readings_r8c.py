"""doctor, round 8 (issue 63): readings of the number-format, attention, visibility and memory families for pastes
that say what went wrong in words (a NaN loss said in Chinese, a dtype hint quoted without its error). Each paste is
written for its reading (another GPU, tool or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # grad_norm NaN said in Chinese, no format named, clipping already set: fp16's range, bf16 is the fix
    ("用8张卡全参微调Qwen2-7B，max_grad_norm设成1.0了，训练到第30步grad_norm就变成nan，怎么回事", "precision", ["bf16"]),
    # a Chinese complaint about a swift run in fp16: bf16 by swift's own flag
    ("swift sft --model_type llama3-8b --torch_dtype float16 跑 LoRA，loss一直是nan", "precision",
     ["--torch_dtype bfloat16"]),
    # the GPU has no bf16 (a T4): fp32, and the reason bf16 cannot be used
    ("Fine-tuning Gemma 2B in float16 on a Tesla T4, the train loss is nan from step 1", "precision",
     ["fp32", "bf16"]),
    # the model is loaded in fp32 and still diverges: the learning rate
    ("model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)\n训练几十步后 loss 变成 nan，"
     "learning_rate=5e-3", "precision", ["lower the learning rate"]),
    # both formats tried on a GPU with bf16: the attention kernel, LLaMA-Factory's switch
    ("llamafactory-cli train qwen_lora.yaml on an H100: grad_norm nan from the first step; tried bf16 and then fp16, "
     "same result", "attention", ["flash_attn: disabled"]),
    # vLLM's advice line quoted alone (no error line), another tool around it: float16 by vLLM's flag
    ("python -m vllm.entrypoints.openai.api_server --model Llama-3-8B-Instruct on 2x P100\n"
     "You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
     "precision", ["--dtype half"]),
    # the same refusal told in words: vLLM, a Turing card, bf16
    ("vllm serve Qwen2.5-7B on an RTX 2080 Ti won't start, it complains about bfloat16", "precision", ["float16"]),
    # black pictures with no error and no size said, in ComfyUI after an update: the VAE's fp32 (ComfyUI's flag)
    ("Since updating ComfyUI every SDXL render comes out as a black image, nothing in the console", "precision",
     ["--fp32-vae"]),
    # "some images" is a few pictures, not a size: still the VAE, the web UI's flag
    ("Automatic1111: I generated some images and every image is all black, no error", "precision", ["--no-half-vae"]),
    # Ray on AMD Instinct GPUs (verl, MI250X): Ray's own ROCR_VISIBLE_DEVICES switch
    ("verl PPO on 4x MI250X (ROCm 6.2): the vLLM rollout workers all land on the same GPU, ray==2.40.0",
     "visibility", ["RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES=1"]),
    # NCCL's remote error between nodes (another NCCL, a deepspeed launch): the network, IB and the socket interface
    ("deepspeed --hostfile hosts.txt train.py on 3 nodes of 8x A800\nncclRemoteError: A call failed possibly due "
     "to a network error or a remote process exiting prematurely.\nsocketProgressOpt: Call to recv from "
     "10.0.0.12<40213> failed : Connection reset by peer", "multi-gpu-transport",
     ["NCCL_SOCKET_IFNAME", "InfiniBand", "NCCL_IB_DISABLE=1"]),
    # NCCL connected (Init COMPLETE) and the run then hangs, on server cards with torchrun: the IOMMU / ACS
    ("torchrun --nproc_per_node 4 train.py on 4x L40S, it hangs forever after this:\n"
     "node3:901:950 [0] NCCL INFO comm 0x5a1 rank 0 nranks 4 cudaDev 0 busId 1000 - Init COMPLETE",
     "multi-gpu-transport", ["iommu=pt", "ACS", "NCCL_P2P_DISABLE=1"]),
    # a bus error with shared memory named, in Chinese, a multi-node run: the container's --shm-size
    ("多机训练时报 Bus error，提示 /dev/shm 空间不够，单卡能跑", "multi-gpu-transport", ["--shm-size"]),
    # a vision-language model out of memory in LLaMA-Factory training: the images' pixel cap, LF's key
    ("llamafactory-cli train internvl2_lora_sft.yaml (stage: sft, 2x RTX 4090)\ntorch.OutOfMemoryError: CUDA out "
     "of memory. Tried to allocate 12.50 GiB", "out-of-memory", ["image_max_pixels"]),
    # bf16=False ignored by a plain Trainer on a V100: accelerate's variable
    ("Trainer still uses bf16 on my V100 even though I pass TrainingArguments(bf16=False, fp16=True)", "precision",
     ["ACCELERATE_MIXED_PRECISION"]),
    # mixed cards, an index from nvidia-smi, the job on the other card: CUDA's order
    ("My box has an RTX 4090 and an RTX 3060. With CUDA_VISIBLE_DEVICES=1 python train.py it still runs on the "
     "other card", "visibility", ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1"]),
    # a worker killed by SIGKILL in a subprocess launcher (accelerate), no error of its own: host memory
    ("accelerate launch --num_processes 8 dpo.py\nsubprocess.CalledProcessError: Command '['python', 'dpo.py']' "
     "died with <Signals.SIGKILL: 9>.", "out-of-memory", ["dmesg", "host memory"]),
    # a multi-node LLaMA-Factory run, one node narrowed by CUDA_VISIBLE_DEVICES, stuck after loading: its ranks
    ("Two nodes, FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=1 CUDA_VISIBLE_DEVICES=0,1,2,3 llamafactory-cli train sft.yaml\n"
     "it gets stuck right after the checkpoint shards are loaded", "visibility", ["NPROC_PER_NODE=4"]),
    # TRL GRPO's vLLM device refused, another GPU set: accelerate's --gpu_ids and --vllm_device auto
    ("CUDA_VISIBLE_DEVICES=1,2,3 accelerate launch --num_processes 2 grpo.py --vllm_device cuda:3\n"
     "ValueError: The requested device for vllm (cuda:3) is not available.", "visibility",
     ["--gpu_ids 1,2,3", "--vllm_device auto"]),
    # a Wan 2.1 LoRA out of memory on a 24 GB card with few small videos: offload the text encoder
    ("Wan 2.1 14B LoRA training, RTX 4090 24GB: CUDA out of memory even with 3 clips at 480p", "out-of-memory",
     ["offload the text encoder", "--blocks_to_swap"]),
    # llama.cpp on a Jetson (another board, the server binary) out of memory: the CUDA VMM pool
    ("Jetson Orin NX 16GB, llama-server -m qwen2.5-7b-q4_k_m.gguf -ngl 99\nggml_cuda_host_malloc: CUDA error: out of "
     "memory", "out-of-memory", ["GGML_CUDA_NO_VMM=ON"]),
    # two AMD cards under ZLUDA in another program (SD.Next): HIP_VISIBLE_DEVICES before it starts
    ("SD.Next with ZLUDA on Windows, RX 6800 XT and RX 6600 installed. How do I choose the GPU? It always uses the "
     "first one", "visibility", ["HIP_VISIBLE_DEVICES"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a NaN in an fp16 run on a card without bf16: not "train in bf16"
    ("fp16 training on a V100 32GB: loss nan at step 200", "train in bf16 instead"),
    # a loss that is fine ("loss 1.93, no nan"): nothing about the learning rate
    ("the loss is 1.93 at step 500 and the eval loss 2.01 with torch_dtype=torch.float32", "lower the learning rate"),
    # one format only (bf16) on an A100: not the attention kernel
    ("bf16 LoRA on an A100: grad_norm nan after 2000 steps", "flash_attn: disabled"),
    # vLLM on an Ampere card with bf16: no bf16 refusal to read
    ("vllm serve Qwen2.5-7B --dtype bfloat16 on an RTX 3090 is slow", "--dtype half"),
    # black only past a size: the attention kernel's reading, not the VAE's
    ("black images at 1536x1536 while 1024x1024 works, xformers installed", "--no-half-vae to COMMANDLINE_ARGS"),
    # Ray on NVIDIA GPUs: nothing about ROCR
    ("OpenRLHF with ray==2.12.0 on 8x H100 (NVIDIA-SMI 550.54): the actors all use GPU 0",
     "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES"),
    # an NCCL failure on one machine with no remote error: not the lost-connection reading
    ("torchrun --nproc_per_node 2 train.py\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled "
     "system error, NCCL version 2.7.8", "leaving out the node whose IB fails"),
    # NCCL set up and the run finished: no stall to read
    ("NCCL INFO comm 0x5a1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\ntraining finished in 2h on 2 GPUs",
     "intel_iommu=off"),
    # a bus error on one GPU with no shared memory named: not the shm reading
    ("python infer.py on one RTX 4090: Bus error (core dumped)", "--shm-size=16g (or --ipc=host; compose"),
    # a text-only model out of memory: no pixel cap
    ("llamafactory-cli train qwen2.5_7b_lora_sft.yaml\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 2.00 GiB", "image_max_pixels"),
    # bf16 turned off and the run fine: nothing about accelerate's variable
    ("TrainingArguments(bf16=False, fp16=True) on a T4, the loss goes down nicely", "ACCELERATE_MIXED_PRECISION"),
    # one model of card only: no ordering to confuse
    ("4x A100 80GB, CUDA_VISIBLE_DEVICES=2 python train.py still runs on GPU 0 per nvidia-smi", "get_device_name(0)"),
    # a segfault (signal 11), not 9: not the OOM killer
    ("torchrun train.py\nexitcode  : -11 (pid: 4410)\nSignal 11 (SIGSEGV) received by PID 4410", "killed process"),
    # one node, LLaMA-Factory, CUDA_VISIBLE_DEVICES and a hang: not the ranks-per-node reading
    ("CUDA_VISIBLE_DEVICES=0,1 llamafactory-cli train sft.yaml hangs at the first step on 2x RTX 4090",
     "NPROC_PER_NODE"),
    # a FLUX picture generated in ComfyUI out of memory (no training): ComfyUI's own flags, not the LoRA offload
    ("ComfyUI FLUX.1 dev at 1024x1024 on an RTX 3060: torch.OutOfMemoryError: CUDA out of memory",
     "--blocks_to_swap"),
    # llama.cpp out of memory on a desktop card: not the Jetson's pool
    ("llama-server -m llama-3-70b-q4_k_m.gguf -ngl 99 on an RTX 4090\nCUDA error: out of memory", "GGML_CUDA_NO_VMM"),
    # ZLUDA on one card with no question of which card: not the device-choice reading
    ("ComfyUI-Zluda on an RX 7900 XTX: the first generation takes 10 minutes compiling", "HIP_VISIBLE_DEVICES="),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
