"""doctor, round 16 (p16f): several GPUs and distributed training in the software's own words - NCCL's and RCCL's
"Last error" lines, torch.distributed / c10d and torchrun's failure summaries, DDP's reducer, DeepSpeed's launcher,
op builds and ZeRO-3, accelerate's device placement, FSDP's flattening, nccl-tests' results and the IOMMU's faults -
each in a paste of our own with the context users paste it in; the negatives keep each reading out of pastes it does
not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # NCCL's buffers finding the GPU full, behind torch's wrapper
    ("torchrun --nproc_per_node 4 train.py\nRuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, "
     "unhandled cuda error, NCCL version 2.7.8\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
     "Cuda failure 2 'out of memory'", "out-of-memory", ["torch.cuda.set_device", "dist.barrier()"]),
    # NCCL's socket on the docker bridge
    ("node2:8812:8890 [3] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>\nnode2:8812:8890 [3] misc/socket.cc:538 "
     "NCCL WARN Net : Connect to 172.17.0.1<51347> failed : Connection timed out", "multi-gpu-transport",
     ["NCCL_SOCKET_IFNAME", "firewall"]),
    # the same refusal as the "Last error" of torch's internal-error wrapper
    ("RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:911, internal error, NCCL version 2.7.8\n"
     "ncclInternalError: Internal check failed. This is either a bug in NCCL or due to memory corruption\nLast error:\n"
     "Net : Connect to 10.10.0.3<39521> failed : No route to host", "multi-gpu-transport", ["NCCL_SOCKET_IFNAME"]),
    # a refused connection: the rank that listened is gone first
    ("[rank1]: ncclInternalError: Internal check failed.\n[rank1]: Last error:\n[rank1]: socketStartConnect: Connect to "
     "10.0.0.7<53211> failed : Connection refused", "multi-gpu-transport", ["first error", "firewall"]),
    # two nodes on different NCCL releases
    ("node a: NCCL version 2.18.1+cuda12.1\nnode b: NCCL version 2.19.3+cuda12.2\nbootstrap.cc:62 NCCL WARN Message "
     "truncated : received 4096 bytes instead of 2048", "multi-gpu-transport", ["same torch and NCCL"]),
    # TORCH_DISTRIBUTED_DEBUG's fingerprint check
    ("TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc_per_node 2 train.py\nRuntimeError: Detected mismatch between "
     "collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST), "
     "but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=12, OpType=BARRIER).",
     "multi-gpu-transport", ["drop_last=True", "rank-only branches"]),
    # the other ranks waiting for rank 0's NCCL id
    ("[rank5]: torch.distributed.DistBackendError: [5] is setting up NCCL communicator and retrieving ncclUniqueId from "
     "[0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after 600000ms",
     "multi-gpu-transport", ["rank 0", "timeout=timedelta"]),
    # the watchdog's own heartbeat
    ("[rank2]:[F ProcessGroupNCCL.cpp:1224] [PG 0 (default_pg) Rank 2] ProcessGroupNCCL's watchdog got stuck for 480 "
     "seconds without making progress in monitoring enqueued collectives.", "multi-gpu-transport",
     ["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]),
    # a rank killed by SIGBUS in a container
    ("docker run --gpus all trainer:latest torchrun --nproc_per_node 8 sft.py\nRoot Cause (first observed failure):\n"
     "[0]:\n  rank      : 3 (local_rank: 3)\n  exitcode  : -7 (pid: 901)\n  error_file: <N/A>", "multi-gpu-transport",
     ["--ipc=host"]),
    # a rank that aborted: its own first error is the next step
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  rank      : 2 (local_rank: 2)\n"
     "  exitcode  : -6 (pid: 4410)\n  traceback : Signal 6 (SIGABRT) received by PID 4410", "multi-gpu-transport",
     ["first error", "Watchdog"]),
    # torchrun's summary without the traceback
    ("  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 77)\n  error_file: <N/A>\n  traceback : To enable "
     "traceback see: https://pytorch.org/docs/stable/elastic/errors.html", "multi-gpu-transport", ["@record"]),
    # a DeepSpeed script started with plain python
    ("$ python finetune.py --deepspeed ds_config.json\n  File \"torch/distributed/distributed_c10d.py\", line 1024, in "
     "_get_default_group\nValueError: Default process group has not been initialized, please make sure to call "
     "init_process_group.", "multi-gpu-transport", ["torchrun --nproc_per_node"]),
    # torchrun's rendezvous across two nodes
    ("torchrun --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=10.1.0.4:29400 train.py\n  File \"torch/distributed/"
     "elastic/rendezvous/dynamic_rendezvous.py\", line 1171, in next_rendezvous\ntorch.distributed.elastic.rendezvous."
     "api.RendezvousTimeoutError", "multi-gpu-transport", ["--rdzv_endpoint", "join_timeout"]),
    # DDP with an unused head
    ("Trainer, LoRA, 2 GPUs\n[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration before "
     "starting a new one. This error indicates that your module has parameters that were not used in producing loss.",
     "multi-gpu-transport", ["ddp_find_unused_parameters=True"]),
    # DDP with reentrant checkpointing
    ("gradient_checkpointing=True, torchrun --nproc_per_node 2\nRuntimeError: Expected to mark a variable ready only "
     "once. This error is caused by one of the following reasons: 1) Use of a module parameter outside the `forward` "
     "function. 2) Reused parameters in multiple reentrant backward passes.", "multi-gpu-transport",
     ["use_reentrant"]),
    # the barrier's guess of the rank's GPU
    ("[rank6]:[W1109 22:19:24.164824990 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 6]  using GPU 6 to perform "
     "barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank "
     "to GPU mapping is incorrect.", "multi-gpu-transport", ["torch.cuda.set_device", "device_id="]),
    # the IPv6 try of localhost, harmless
    ("[W socket.cpp:697] [c10d] The client socket has failed to connect to [localhost]:12355 (errno: 97 - Address "
     "family not supported by protocol).", "multi-gpu-transport", ["nothing to fix"]),
    # what is left of a failed cpu_adam build
    ("Using /root/.cache/torch_extensions/py311_cu121 as PyTorch extensions root...\nLoading extension module "
     "cpu_adam...\nImportError: /root/.cache/torch_extensions/py311_cu121/cpu_adam/cpu_adam.so: cannot open shared "
     "object file: No such file or directory", "rocm-libs-missing", ["DS_BUILD_CPU_ADAM=1", "torch_extensions"]),
    # ds_report on a RHEL box
    ("$ ds_report\n [WARNING]  async_io requires the dev libaio .so object and headers but these were not found.\n "
     "[WARNING]  async_io: please install the libaio-devel package with yum\nasync_io ............... [NO] ....... [NO]",
     "rocm-libs-missing", ["libaio-dev"]),
    # the deepspeed launcher's pdsh without keys
    ("deepspeed --hostfile hostfile train.py\npdsh@worker-0: worker-1: ssh exited with exit code 255",
     "multi-gpu-transport", ["ssh-copy-id"]),
    # a device_map under ZeRO-3
    ("model = AutoModelForCausalLM.from_pretrained(name, device_map='auto', quantization_config=bnb)\nValueError: "
     "DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a `device_map`.",
     "multi-gpu-transport", ["drop device_map"]),
    # ZeRO-3 at the edge of memory
    ("[WARNING] [stage3.py:1991:step] 4 pytorch allocator cache flushes since last step. this happens when there is "
     "high memory pressure and is detrimental to performance.", "out-of-memory", ["train_micro_batch_size_per_gpu"]),
    # QLoRA under accelerate's DDP, every rank on GPU 0
    ("accelerate launch --multi_gpu --num_processes 2 qlora.py\nValueError: You can't train a model that has been loaded "
     "in 8-bit precision on a different device than the one you're training on. Make sure you loaded the model on the "
     "correct device using for example `device_map={'':torch.cuda.current_device() or device_map={'':torch.xpu."
     "current_device()}", "visibility", ["PartialState().process_index"]),
    # device_map="auto" under torchrun
    ("torchrun --nproc_per_node=2 train_sft_trl.py\n[rank1]: ValueError: You can't train a model that has been loaded "
     "with `device_map='auto'` in any distributed mode. Please rerun your script specifying `--num_processes=1`",
     "visibility", ["PartialState().process_index", "one process"]),
    # QLoRA under FSDP with uint8 storage
    ("FSDP + QLoRA, BitsAndBytesConfig(load_in_4bit=True)\nValueError: Must flatten tensors with uniform dtype but got "
     "torch.bfloat16 and torch.uint8", "multi-gpu-transport", ["bnb_4bit_quant_storage=torch.bfloat16"]),
    # fp32 adapters on a bf16 base under FSDP
    ("  File \"torch/distributed/fsdp/_flat_param.py\", line 785, in _validate_tensors_to_flatten\nValueError: Must "
     "flatten tensors with uniform dtype but got torch.bfloat16 and torch.float32", "precision",
     ["autocast_adapter_dtype=False", "use_orig_params"]),
    # frozen base and trainable adapters in one FSDP unit
    ("accelerate launch --config_file fsdp.yaml train_lora.py\nValueError: Must flatten tensors with uniform "
     "`requires_grad` when `use_orig_params=False`", "multi-gpu-transport", ["fsdp_use_orig_params: true"]),
    # all_gather_perf delivering wrong data
    ("$ mpirun -np 4 ./build/all_gather_perf -b 1M -e 64M -f 2 -g 1\n# Out of bounds values : 96 FAILED\n"
     "# Avg bus bandwidth    : 12.03", "multi-gpu-transport", ["NCCL_P2P_DISABLE=1", "ACS"]),
    # VT-d dropping a GPU's writes
    ("$ sudo dmesg | grep DMAR\n[  812.33] DMAR: [DMA Write NO_PASID] Request device [c1:00.0] fault addr 0xe0000000 "
     "[fault reason 0x05] PTE Write access is not set", "platform-bios", ["iommu=pt"]),
    # all_reduce_perf over four GPUs at a fraction of a GB/s
    ("$ ./build/all_reduce_perf -b 8 -e 256M -f 2 -g 4\n# Avg bus bandwidth    : 0.184", "multi-gpu-transport",
     ["NCCL_P2P_DISABLE=1", "iommu=pt"]),
    # NCCL 2.21's wording of the RoCE retry timeout, as torch repeats it
    ("[rank9]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
     "remote process exited or there was a network error, NCCL version 2.21.5\n[rank9]: ncclRemoteError: A call "
     "failed possibly due to a network error or a remote process exiting prematurely.\n[rank9]: Last error:\n[rank9]: "
     "NET/IB: Got completion from peer 10.153.235.13<40554> with status=IBV_WC_RETRY_EXC_ERR(12) "
     "opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=129 localGid ::ffff:1.1.2.2", "multi-gpu-transport",
     ["NCCL_IB_GID_INDEX=3"]),
]

NEGATIVES = [
    # small messages only: their bandwidth is latency, not a crawling path
    ("$ ./build/all_reduce_perf -b 8 -e 1024 -f 2 -g 2\n# Avg bus bandwidth    : 0.0412", "over messages of a megabyte"),
    # one GPU: a bus bandwidth of 0 is what one rank gets
    ("$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 1\n# Avg bus bandwidth    : 0", "over messages of a megabyte"),
    # a clean result is no failure
    ("$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 182.5",
     "NCCL_P2P_DISABLE=1"),
    # onnxruntime's own out-of-memory wording is not NCCL's
    ("onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: CUDA failure 2: out of memory", "dist.barrier()"),
    # a refused connection to another node is no harmless IPv6 try
    ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [node01]:29500 (errno: 111 - Connection "
     "refused).", "nothing to fix"),
    # mixed float dtypes are not a quantized base
    ("ValueError: Must flatten tensors with uniform dtype but got torch.float16 and torch.float32",
     "bnb_4bit_quant_storage"),
    # an extension of one's own is not DeepSpeed's op
    ("RuntimeError: Error building extension 'lltm_cpp'", "DS_BUILD_CPU_ADAM"),
    # unused parameters are not reentrant checkpointing
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.",
     "use_reentrant"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
