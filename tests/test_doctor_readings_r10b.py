"""doctor, round 10 (issue 63): readings of how a launch picks its GPUs (visibility) and how the ranks of a run find
and wait for each other (multi-gpu-transport), with vLLM's NCCL library path and NCCL too old for a Blackwell card
beside them. Each paste is written for its reading (another GPU, tool or wording than the mined case that asked for
it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

import pytest

from test_doctor_paraphrases import PASTINGS, assert_a_rule_reads, assert_no_rule_says, pasting_misses

# (paste, family, phrases the fix must say)
READINGS = [
    # ms-swift asked for data parallel in English, two GPUs listed: NPROC_PER_NODE equal to them
    ("CUDA_VISIBLE_DEVICES=2,3 swift sft --model Qwen2.5-7B-Instruct --train_type lora\n"
     "How do I run DDP with swift? Only one of the two A100s is busy at any time", "visibility",
     ["NPROC_PER_NODE=2", "CUDA_VISIBLE_DEVICES=2,3"]),
    # LLaMA-Factory asked in English, four cards said: the visible GPUs on llamafactory-cli
    ("LLaMA-Factory 0.9.1: how to use all 4 GPUs for LoRA training? I don't see a parameter for the GPU count",
     "visibility", ["CUDA_VISIBLE_DEVICES=0,1,2,3 llamafactory-cli train"]),
    # a Trainer script started with python on a box of 2 cards: one process, accelerate launch
    ("from transformers import Trainer\nmy script is started with python finetune.py on a server with 2 RTX 4090; "
     "only one GPU is used, the second stays at 0%", "visibility", ["accelerate launch", "--num_processes 2"]),
    # torchtune asked in Chinese with four cards: its distributed recipe
    ("torchtune 怎么用4卡训练？现在 tune run lora_finetune_single_device 只用了一张卡", "visibility",
     ["tune run --nproc_per_node 4 lora_finetune_distributed"]),
    # a Lightning module on a box of 8 GPUs, only one busy: the Trainer's devices and strategy
    ("import lightning.pytorch as pl\nmy LightningModule only uses one GPU out of 8 GPUs on the server, how to use "
     "all the GPUs?", "visibility", ["devices=8", "strategy=\"ddp\""]),
    # Unsloth, another card to take, said in other words: the variable before the import
    ("Unsloth on a workstation with an RTX 3060 and an RTX 3090: how do I select the GPU device number? I want it to "
     "use gpu 1", "visibility", ['os.environ["CUDA_VISIBLE_DEVICES"] = "1"', "before importing unsloth"]),
    # DataParallel's replica error from another library (a notebook, no Unsloth): one GPU or one process per GPU
    ("Traceback (most recent call last):\nRuntimeError: Caught RuntimeError in replica 2 on device 2.\n"
     "Original Traceback (most recent call last):\n  File \"torch/nn/parallel/parallel_apply.py\", line 84, in _worker",
     "visibility", ["CUDA_VISIBLE_DEVICES=0", "accelerate launch"]),
    # the deepspeed launcher's slot error with other GPUs: --include with the ids asked
    ("CUDA_VISIBLE_DEVICES=1,3 deepspeed train.py --deepspeed ds_z2.json\n"
     "ValueError: No slot '3' specified on host 'localhost'", "visibility", ["deepspeed --include localhost:1,3"]),
    # SLURM --ntasks-per-gpu on a plain torchrun job: per-node GPUs
    ("sbatch --nodes=1 --ntasks-per-gpu=1 --gres=gpu:4 job.sh (slurm 23.02)\n"
     "each process only ever sees one GPU, torch.cuda.device_count() is 1 in every task", "visibility",
     ["--gpus-per-node", "--ntasks-per-node"]),
    # a watchdog-free 30-minute failure while mapping a dataset in a TRL script: the Trainer's ddp_timeout
    ("SFTTrainer with 8 GPUs: the dataset .map() takes about 40 minutes and the job dies at exactly 30 minutes with a "
     "timeout", "multi-gpu-transport", ["ddp_timeout"]),
    # NCCL's watchdog at the default 30 minutes while LLaMA-Factory's tokenizer is still running: its ddp_timeout key
    ("llamafactory-cli train qwen_sft.yaml\nRunning tokenizer on dataset (num_proc=16):  61%| 2210000/3600000 "
     "[29:40<18:40]\n[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
     "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800094 milliseconds before timing out.",
     "multi-gpu-transport", ["ddp_timeout: 180000000"]),
    # a torchrun job on two machines that works on one: NCCL's socket interface
    ("torchrun --nnodes=2 --nproc_per_node=8 train.py\nIt works fine on a single node, but with two nodes it hangs "
     "after the rendezvous", "multi-gpu-transport", ["NCCL_SOCKET_IFNAME"]),
    # gloo refused on a loopback address from another torch: GLOO_SOCKET_IFNAME
    ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
     "what(): connect [127.0.1.1]:29500: Connection refused", "multi-gpu-transport", ["GLOO_SOCKET_IFNAME"]),
    # the store's port taken, said by accelerate's run: another port for the launch
    ("accelerate launch --multi_gpu train.py\ntorch.distributed.DistNetworkError: The server socket has failed to "
     "listen on any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address "
     "already in use", "multi-gpu-transport", ["--main_process_port 29501"]),
    # the libuv store on Windows, from another program: USE_LIBUV=0
    ("python -m torch.distributed.run --nproc_per_node 1 finetune.py\n"
     "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built without libuv support",
     "multi-gpu-transport", ["USE_LIBUV=0"]),
    # vLLM's pynccl on another path: the library path variable
    ("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2\n"
     "ERROR pynccl.py:44] Failed to load NCCL library from /opt/nccl/libnccl.so.2 .It is expected if you are not "
     "running on NVIDIA/AMD GPUs.", "rocm-libs-missing", ["VLLM_NCCL_SO_PATH"]),
    # DDP on two RTX 5080s with NCCL failing, no release said: torch for CUDA 12.8
    ("DDP training on 2x RTX 5080 fails: RuntimeError: NCCL error: unhandled cuda error", "arch-missing",
     ["cu128", "2.26.2"]),
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
    # several GPUs said as context of a NaN loss: no launcher to name
    ("单机多卡训练 qwen2-7b，grad_norm 一直是 nan", "accelerate launch"),
    # asking to shard one model over the cards (memory), not to use them all: no NPROC_PER_NODE
    ("swift sft 单机多卡会把模型加载到每一个卡上，怎么实现模型并行？", "NPROC_PER_NODE"),
    # Ollama on several GPUs: its own scheduler, not a training launcher
    ("ollama on 2x RTX 3090: only one GPU is used for llama3:70b, how to use all gpus?", "accelerate launch"),
    # an image app on two cards (ComfyUI): not a training launcher
    ("ComfyUI on 2x RTX 3090: how to use multiple GPUs? only one GPU is used", "accelerate launch"),
    # a notebook moving the model to the CPU: no GPU to choose
    ("in my jupyter notebook, how do I change device to cpu for unsloth inference?", "CUDA_VISIBLE_DEVICES"),
    # one machine's store refused on 127.0.0.1: no interface to name
    ("torchrun --nproc_per_node 2 train.py --backend gloo\nconnect [127.0.0.1]:29500: Connection refused",
     "GLOO_SOCKET_IFNAME"),
    # a web server whose port is taken: no distributed store in it
    ("uvicorn app:app --port 8000\nOSError: [Errno 98] Address already in use", "--master_port"),
    # deepspeed with no GPU choice anywhere: nothing about --include
    ("deepspeed --num_gpus 8 train.py --deepspeed ds_z3.json\ntorch.cuda.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 2.00 GiB", "--include"),
    # SLURM with per-node GPUs already and no complaint about them: no per-task reading
    ("sbatch --gpus-per-node=4 --ntasks-per-node=4 job.sh\nthe job finished fine", "--gpus-per-node="),
    # a 30-minute run that finished, nothing timing out: no ddp_timeout
    ("tokenization of the dataset took 30 minutes and training then ran fine", "ddp_timeout"),
    # the watchdog at 30 minutes in the middle of training, no preprocessing said: not the preprocessing reading
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5121, OpType=ALLREDUCE, "
     "Timeout(ms)=1800000) ran for 1800523 milliseconds before timing out.", "ddp_timeout"),
    # a one-node hang with no second node: not the socket interface
    ("torchrun --nproc_per_node=2 train.py on 2x RTX 3090 hangs at the first all_reduce", "NCCL_SOCKET_IFNAME"),
    # a Blackwell card with torch 2.8 already: not "install torch for CUDA 12.8"
    ("torch 2.8.0+cu128, DDP on 2x RTX 5090: NCCL error: unhandled cuda error", "pip install torch --index-url"),
]


@pytest.mark.parametrize("paste,not_said", NEGATIVES, ids=[n[0][:48] for n in NEGATIVES])
def test_a_reading_stays_out_of_a_paste_it_does_not_fit(paste, not_said):
    assert_no_rule_says(paste, not_said)
