"""doctor, round 11 (issue 63): readings of the multi-gpu-transport and out-of-memory families. Each paste is written
for its reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep
each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the watchdog's collective waited its whole (5-minute) timeout while rank 0 built an index alone
    ("rank 0 is building the faiss index for 40M passages, the other ranks wait\n[rank2]:[E ProcessGroupNCCL.cpp:616] "
     "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST, NumelIn=1, "
     "NumelOut=1, Timeout(ms)=300000) ran for 300412 milliseconds before timing out.", "multi-gpu-transport",
     ["init_process_group(..., timeout=", "ddp_timeout"]),
    # two nodes that hang right at NCCL's start (said in English, torchrun): the socket interface
    ("torchrun --nnodes 2 --nproc_per_node 8 on two servers with H100s: the job hangs at init_process_group with the "
     "nccl backend, nothing printed after it", "multi-gpu-transport", ["NCCL_SOCKET_IFNAME="]),
    # NCCL's shared memory asked about for a Kubernetes deployment: a memory-backed emptyDir at /dev/shm
    ("Deploying SGLang with --tp 4 on our Kubernetes cluster (helm chart): how do I give NCCL more shared memory in "
     "the pod?", "multi-gpu-transport", ["emptyDir", "medium: Memory", "/dev/shm"]),
    # rccl-tests under mpirun over two nodes, each printing its own result: built without MPI
    ("mpirun -np 2 --hostfile hosts ./build/all_reduce_perf -b 8 -e 1G -f 2 -g 8\n# Using devices\n"
     "#  Rank  0 Group  0 Pid  4011 on mi300-a device  0 [0000:0c:00.0] AMD Instinct MI300X\n"
     "# Avg bus bandwidth    : 301.22\n# Avg bus bandwidth    : 300.97", "multi-gpu-transport",
     ["MPI=1", "rccl-tests"]),
    # RCCL's P2P transport failing on MI250X joined by an XGMI bridge, under torchrun
    ("2x MI250X with the XGMI bridge installed, torchrun --nproc_per_node 4 train.py\nnode1:4212:4212 "
     "[1] /long_pathname/rccl/src/transport/p2p.cc:196 NCCL WARN Cuda failure 'invalid device pointer'",
     "multi-gpu-transport", ["amdgpu.use_xgmi_p2p=0", "GRUB_CMDLINE_LINUX_DEFAULT"]),
    # TensorRT-LLM's serve taking most of an H100: its KV-cache fraction, per instance
    ("trtllm-serve takes 72GB of my H100 at startup for an 8B model; can I limit memory usage so two servers fit on "
     "one GPU?", "out-of-memory", ["kv_cache_free_gpu_memory_fraction", "kv_cache_free_gpu_mem_fraction"]),
    # a shared-memory bus error although the container was started with --shm-size: the container predates the flag
    ("RuntimeError: DataLoader worker (pid 2231) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory limit.\nI already added --shm-size=8g "
     "to my docker run and restarted it with docker start trainer", "out-of-memory",
     ["df -h /dev/shm", "new container"]),
    # a model said to need more than the GPU has, asked in words (transformers, another size)
    ("Mixtral-style 14B model needs about 28 GB of VRAM in fp16 and my RTX 4090 has 24 GB VRAM; is there a way to "
     "load it with transformers?", "out-of-memory", ["load_in_8bit", "14 GB"]),
    # Ollama seeing four A6000s and placing no layer on them (its own log line): the context
    ("ollama serve on 4x A6000 (192 GB of VRAM)\nmsg=\"offload to cuda\" layers.requested=-1 layers.model=95 "
     "layers.offload=0 layers.split=\"\" memory.available=\"[47.2 GiB 47.2 GiB 47.2 GiB 47.2 GiB]\" "
     "memory.graph.full=\"61.5 GiB\"", "out-of-memory", ["OLLAMA_CONTEXT_LENGTH", "num_ctx", "61.5 GiB"]),
    # TensorRT-LLM 0.10's custom all-reduce on two consumer cards without P2P
    ("tensorrt_llm 0.10.0, 2x RTX 4090, tp_size=2\nRuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Can't "
     "enable access between nodes 0 and 1", "multi-gpu-transport", ["0.12", "nvidia-smi topo -p2p r"]),
    # out of memory said on a 32 GB Strix Halo (another size, Ollama): the GPU's share, and the 128 GB model
    ("Ryzen AI Max+ 395 mini PC with 32GB, Ollama: llama3.3 70b fails with out of memory", "out-of-memory",
     ["128 GB Strix Halo", "about 16 GB"]),
    # RCCL slow on MI300X with the Pollara NIC, said another way, with the release: the release that resolved it
    ("ROCm 7.1.1, 8x MI300X with Pollara 400 NICs: RCCL alltoall bandwidth dropped by half since the upgrade",
     "multi-gpu-transport", ["ROCm 7.2", "develop branch"]),
    # a thin report that multi-node training fails (English, deepspeed)
    ("Training fails when I run deepspeed across 2 nodes", "multi-gpu-transport",
     ["torch.cuda.nccl.version()", "NCCL_SOCKET_IFNAME"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # a watchdog timeout with no rank working alone (the first all-reduce never completing): not "raise the timeout"
    ("[rank1]:[E ProcessGroupNCCL.cpp:523] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
     "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600318 milliseconds before timing out.\n"
     "4x RTX 3090, torchrun --nproc_per_node 4", "init_process_group(..., timeout="),
    # one machine hanging at init: not the interface between nodes
    ("torchrun --nproc_per_node 4 hangs at init_process_group on my workstation with 4x RTX 4090",
     "NCCL_SOCKET_IFNAME=<the interface both nodes share"),
    # Kubernetes and NCCL with no shared memory said: not the emptyDir
    ("vLLM on Kubernetes with tensor parallel 2: throughput is lower than expected, NCCL all-reduce slow", "emptyDir"),
    # a single rccl-tests result: nothing ran apart
    ("mpirun -np 16 --hostfile hosts ./build/all_reduce_perf -b 8 -e 1G -f 2 -g 1\n# Avg bus bandwidth    : 290.1",
     "MPI=1"),
    # the same P2P failure on consumer cards with no bridge: not the XGMI switch
    ("2x RX 7900 XTX, torchrun --nproc_per_node 2\n/rccl/src/transport/p2p.cc:196 NCCL WARN Cuda failure "
     "'invalid argument'", "use_xgmi_p2p"),
    # a TensorRT-LLM build error: not the KV-cache fraction
    ("trtllm-build --checkpoint_dir ./ckpt --output_dir ./engine fails: KeyError: 'lm_head.weight'",
     "kv_cache_free_gpu"),
    # the shm bus error with no flag given: the plain fix, not "takes effect only when a container is created"
    ("RuntimeError: DataLoader worker (pid 2231) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.", "takes effect only when"),
    # a model that needs far less than the GPU has: no 8-bit advice
    ("the 7B model needs about 8 GB of VRAM and I have 48 GB of VRAM; can I run two copies?", "load_in_8bit"),
    # Ollama finding no GPU at all (0 layers because there is no GPU): not the context
    ("ollama: no compatible GPUs were discovered\nllm_load_tensors: offloaded 0/33 layers to GPU",
     "OLLAMA_CONTEXT_LENGTH"),
    # TensorRT-LLM 0.13 already: not "upgrade to 0.12"
    ("TensorRT-LLM version: 0.13.0\nRuntimeError: Can't enable access between nodes 1 and 0", "upgrade to TensorRT-LLM"),
    # out of memory on the 128 GB Strix Halo: not "the 128 GB model"
    ("Strix Halo 128GB, LM Studio: out of memory loading a 235B model", "need the 128 GB"),
    # the Pollara issue with the release that resolved it: not "upgrade to ROCm 7.2"
    ("ROCm 7.2.1 on MI300X with Pollara NICs: RCCL alltoall performance lower than expected", "upgrade to ROCm 7.2"),
    # a thin report of one-node training failing: not the multi-node check
    ("Training fails when I run deepspeed on one node", "torch.cuda.nccl.version()"),
]


test_a_reading_names_the_family_and_its_fix, test_every_reading_survives_how_it_is_pasted, \
    test_a_reading_stays_out_of_pastes_it_does_not_fit = reading_tests(READINGS, NEGATIVES)
